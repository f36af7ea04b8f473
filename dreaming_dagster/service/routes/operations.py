"""GET /healthz (the database answers; the schema version) and GET /metrics (Prometheus), without a key."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from dreaming_dagster.service.dependencies import ServiceDep
from dreaming_dagster.service.limits import ParsedOnceRoute, error_body
from dreaming_dagster.service.shapes import Health
from dreaming_dagster.sql import load_sql

router = APIRouter(route_class=ParsedOnceRoute)


@router.get("/healthz", summary="The database answers; the schema version", response_model=Health,
            responses={503: {"description": "the database does not answer"}})
def healthz(service: ServiceDep) -> Response:
    try:
        with service.database.connect(vectors=False) as conn:
            version = conn.execute(load_sql("service/health")).fetchone()["schema_version"]
    except Exception as error:  # noqa: BLE001 - any failure to answer is "unhealthy"
        return JSONResponse(error_body("unhealthy", f"database unreachable: {type(error).__name__}"),
                            status_code=503)
    return JSONResponse({"status": "ok", "database": "reachable", "schema_version": version})


@router.get("/metrics", summary="Prometheus metrics")
def prometheus(service: ServiceDep) -> Response:
    body, content_type = service.metrics.render()
    return Response(body, media_type=content_type)
