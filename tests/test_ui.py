"""The Dagster UI in a real browser (Playwright driving Debian's Chromium, headless): after demo-style
data (a dreamed demo user and a small train_ranker_job run), what a person opening `make ui` sees.
Screenshots go to a temporary folder; `make screenshots` runs this module with DREAMING_SCREENSHOT_DIR=docs/img
to refresh the committed ones (a test run never writes into the tree)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, free_port

pytestmark = pytest.mark.slow  # drives the Dagster UI in a browser

BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DREAMING = ["memory_pairs", "pair_subjects", "subjects", "subject_links", "refined_subjects"]
RANKER = ["longmemeval_memory", "memory_encoder", "encoded_memories", "longmemeval_haystacks", "longmemeval_pools",
          "ranker_model", "ranker_evaluation"]
# The smallest run that fills every page the tests open: one process for all steps (a step process per
# asset would import torch and Dagster four times over), 8 questions, the suite's trimmed haystacks, LoCoMo
# conversations and RealMem personas (conftest), one epoch, one seed, one network.
RANKER_CONFIG = """execution: {{config: {{in_process: {{}}}}}}
ops:
  longmemeval_memory: {{config: {{limit_questions: 8, user_prefix: longmemeval-ui}}}}
  longmemeval_haystacks: {{config: {{dataset_path: "{haystacks}", training_questions: 1, limit_questions: 1}}}}
  locomo_memory: {{config: {{dataset_path: "{locomo}"}}}}
  realmem_memory: {{config: {{dataset_path: "{realmem}"}}}}
  memory_encoder: {{config: {{limit_questions: 4}}}}
  longmemeval_pools: {{config: {{pool_size: 20}}}}
  ranker_model: {{config: {{epochs: 1, promote: false, seeds: [0], hidden_choices: [[]]}}}}
"""

if not CHROMIUM:
    if os.environ.get("CI"):
        raise RuntimeError("CI must run the browser test: install Chromium (make browser)")
    pytest.skip("no Chromium here (make browser installs Debian's)", allow_module_level=True)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where screenshots go: DREAMING_SCREENSHOT_DIR (make screenshots: docs/img), else a temporary folder."""
    chosen = os.environ.get("DREAMING_SCREENSHOT_DIR")
    folder = Path(chosen).resolve() if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _env(data_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_") and k != "DAGSTER_HOME"}
    return env | {"DREAMING_DATA_DIR": str(data_dir)}


def serve_ui(data_dir: Path, env: dict):
    """`dreaming exec -- dg dev` on a free port until the UI answers; yields its base URL, then stops it."""
    port = free_port()
    log = (data_dir / "dg-dev.log").open("w")
    server = subprocess.Popen([str(BIN / "dreaming"), "exec", "--", "dg", "dev", "--port", str(port)], cwd=PROJECT_ROOT,
                              env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while True:
        try:
            with urllib.request.urlopen(base + "/server_info", timeout=5) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        assert server.poll() is None, (data_dir / "dg-dev.log").read_text()[-3000:]
        assert time.time() < deadline, "the UI did not come up in 180 s"
        time.sleep(0.5)
    yield base
    os.killpg(server.pid, signal.SIGTERM)  # dreaming exec forwards it to dg dev, then stops the server
    server.wait(timeout=60)
    log.close()


@pytest.fixture(scope="module")
def ui(tmp_path_factory, trimmed_haystacks, trimmed_locomo, trimmed_realmem):
    data_dir = tmp_path_factory.mktemp("ui")
    env = _env(data_dir)
    dreaming = str(BIN / "dreaming")
    subprocess.run([dreaming, "demo", "--users", "1", "--questions-per-user", "2"], cwd=PROJECT_ROOT, env=env,
                   check=True, capture_output=True, timeout=600)
    config = data_dir / "ranker.yaml"
    config.write_text(RANKER_CONFIG.format(haystacks=trimmed_haystacks, locomo=trimmed_locomo,
                                             realmem=trimmed_realmem))
    subprocess.run([dreaming, "exec", "--", "dagster", "job", "execute", "-m", "dreaming_dagster.definitions", "-j",
                    "train_ranker_job", "-c", str(config)], cwd=PROJECT_ROOT, env=env, check=True,
                   capture_output=True, timeout=900)
    for base in serve_ui(data_dir, env):
        ui_data_dirs[base] = str(data_dir)
        yield base


# Each UI's data directory by its base URL: the tests that write to its instance run `dreaming exec` there.
ui_data_dirs: dict[str, str] = {}


@pytest.fixture(scope="module")
def bucket_ui(tmp_path_factory):
    """The same UI for a deployment switched to 4 hash buckets of users, after the demo dreamed 2 users."""
    data_dir = tmp_path_factory.mktemp("bucket-ui")
    env = _env(data_dir)
    dreaming = str(BIN / "dreaming")
    subprocess.run([dreaming, "dagster", "partitioning", "--buckets", "4"], cwd=PROJECT_ROOT, env=env, check=True,
                   capture_output=True, timeout=300)
    subprocess.run([dreaming, "demo", "--users", "2", "--questions-per-user", "1"], cwd=PROJECT_ROOT, env=env,
                   check=True, capture_output=True, timeout=600)
    yield from serve_ui(data_dir, env)


@pytest.fixture(scope="module")
def page(ui):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        yield page
        browser.close()


def visit(page, base: str, path: str) -> None:
    page.goto(base + path, wait_until="networkidle")
    skip = page.get_by_role("button", name="Skip")  # the first visit's newsletter dialog
    if skip.count():
        skip.click()
    page.wait_for_timeout(1500)


def edges(page) -> int:
    return page.locator("svg path[marker-end]").count()


@pytest.mark.parametrize(("group", "assets"), [("dreaming", DREAMING), ("ranker", RANKER)])
def test_the_asset_graph_shows_each_group_with_its_lineage(ui, page, shots, group, assets):
    # Wide enough that a long chain is drawn at a zoom that names every asset in full.
    page.set_viewport_size({"width": 2400 if len(assets) > 5 else 1600, "height": 1000})
    visit(page, ui, f"/locations/dreaming_dagster/asset-groups/{group}")
    for asset in assets:
        page.get_by_text(asset, exact=True).first.wait_for()
    assert edges(page) >= len(assets) - 1  # a chain: every asset but the first has its upstream edge
    page.screenshot(path=str(shots / f"asset-graph-{group}.png"))


def test_the_users_partitions_of_subjects_show_as_materialized(ui, page, shots):
    visit(page, ui, "/assets/subjects?view=partitions")
    page.get_by_text("Materialized (1)").wait_for()
    assert page.get_by_text("demo-user-1").count() >= 1
    assert page.get_by_text("Missing (0)").count() == 1
    page.screenshot(path=str(shots / "subjects-partitions.png"))


def test_the_sensors_are_listed_and_running(ui, page, shots):
    visit(page, ui, "/automation")
    running = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll('input[type=checkbox]'))
        .map(box => { let row = box; for (let i = 0; i < 6; i++) row = row.parentElement;
                      return [row.innerText.split('\\n')[0], box.checked]; }))""")
    assert all(running.get(name) is True for name in ("pending_pairs_sensor", "token_budget_sensor",
                                                      "fast_path_sensor")), running
    page.screenshot(path=str(shots / "sensors.png"))


def test_the_latest_ranker_evaluation_shows_its_metrics_table(ui, page, shots):
    visit(page, ui, "/assets/ranker_evaluation")
    page.get_by_text("oracle_validation_ndcg@10_v6").wait_for()
    page.get_by_text("[Show Markdown]").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("heading", name="oracle validation").first.wait_for()
    text = dialog.inner_text()
    for cell in ("ndcg@10", "recall@10", "needle hit %", "cosine", "bm25", "v6 (gold type)", "v2-cosine-pool",
                 "session recall_all@10", "pool recall (ceiling"):
        assert cell in text, cell

# The shipped model's evaluation (the committed from-nothing run) reported as ranker_evaluation's latest
# materialization, as the asset reports its own: what the docs' screenshot shows a reader.
SHIPPED_EVALUATION = """import json, sys
import dagster as dg
from dreaming_dagster.training.evaluation import Evaluation, markdown_report
run = json.load(open(sys.argv[1]))
e = run["evaluation"]
report = markdown_report(Evaluation(e["overall"], e["by_type"], e["mean_weights"], e["questions"],
                                    e["spread_on_gathering_questions"]),
                         title="Ranker evaluation: the shipped model", context=e["context"],
                         pool_label="cosine top-K for cosine and the cosine-pool model, hybrid for the rest")
with dg.DagsterInstance.get() as instance:
    instance.report_runless_asset_event(dg.AssetMaterialization(
        "ranker_evaluation", description=f"the shipped model, {run['command']}",
        metadata={"report": dg.MetadataValue.md(report)}))
"""


def test_the_shipped_models_evaluation_is_the_screenshot_the_docs_show(ui, page, shots):
    results = PROJECT_ROOT / "bench" / "results" / "longmemeval.json"
    subprocess.run([str(BIN / "dreaming"), "exec", "--", sys.executable, "-c", SHIPPED_EVALUATION, str(results)],
                   cwd=PROJECT_ROOT, env=_env(Path(ui_data_dirs[ui])), check=True, capture_output=True, timeout=300)
    visit(page, ui, "/assets/ranker_evaluation")
    page.get_by_text("[Show Markdown]").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("heading", name="Ranker evaluation: the shipped model").wait_for()
    text = dialog.inner_text()
    shipped = json.loads(results.read_text())["evaluation"]
    for split, count in shipped["questions"].items():
        assert f"{split.replace('`', '')} ({count} questions)" in text.replace("`", ""), split
    page.wait_for_timeout(1000)  # the dialog fades in
    # The page as a reader sees it, the report from its top (the dialog's overlay opens scrolled to its buttons): the
    # dialog alone is as tall as the whole report, and the browser paints only what is in view.
    page.evaluate("() => document.querySelectorAll('*').forEach(element => { element.scrollTop = 0; })")
    page.wait_for_timeout(300)
    page.screenshot(path=str(shots / "ranker-evaluation.png"))
    page.get_by_role("button", name="Close").click()


def test_with_buckets_the_partitions_are_the_buckets(bucket_ui, page, shots):
    """Two demo users hash into one or two of the four buckets: those are materialized, the rest missing; the
    one-user job is there for on-demand work."""
    from dreaming_dagster.pipeline.buckets import group_by_bucket

    dreamed = sorted(group_by_bucket(["demo-user-1", "demo-user-2"], 4))
    visit(page, bucket_ui, "/assets/subjects?view=partitions")
    page.get_by_text(f"Materialized ({len(dreamed)})").wait_for()
    page.get_by_text(f"Missing ({4 - len(dreamed)})").wait_for()
    assert page.get_by_text(dreamed[0]).count() >= 1
    assert page.get_by_text("demo-user-1").count() == 0
    page.screenshot(path=str(shots / "subjects-bucket-partitions.png"))
    visit(page, bucket_ui, "/locations/dreaming_dagster/jobs/user_memory_job")
    page.get_by_text("user_request", exact=True).first.wait_for()
