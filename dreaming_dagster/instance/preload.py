"""What the run workers' fork server holds before it forks a run's process (fork_server.py): the
libraries a run's steps import (transformers' tokenizers alone take a second), the code location's modules
(its definitions built once, which imports every asset's module), spaCy's English pipeline and the token
counter's encoding. Importing this module loads them; only the fork server imports it.

Nothing here opens a connection (a forked process must not share another's socket) or loads the embedder:
ONNX Runtime and torch start their thread pools with a model, and a forked process inherits a pool without its
threads. Each run loads the embedder itself (a quarter of a second once its libraries are imported).
"""

import dagster  # noqa: F401
import dagster_postgres  # noqa: F401
import onnxruntime  # noqa: F401
import openai  # noqa: F401
import psycopg_pool  # noqa: F401
import spacy  # noqa: F401
import torch  # noqa: F401
from transformers import AutoTokenizer  # noqa: F401

from dreaming_dagster.definitions import definitions_for
from dreaming_dagster.defs.layout import Layout
from dreaming_dagster.extraction.entities import english_pipeline
from dreaming_dagster.ingest.tokens import count_tokens

definitions_for(Layout(0))
english_pipeline()
count_tokens("")  # loads the encoding
