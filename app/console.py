"""``/console``: the operator console, a static bundle built from ``console/``
(Preact + htm + uPlot, built by Vite; docs/console.md) and served as files.

The console is a client of the public API and nothing more: it reads the same
endpoints and sends the admin token, which the operator types into it, as
``Authorization: Bearer`` (kept in the tab's sessionStorage, never in a URL or a
cookie).  No cookie carries authority, so a cross-site page cannot make the
browser act with it: there is nothing for CSRF to ride on.

Every page gets a Content-Security-Policy that lets it load and call nothing but
this node (no CDN, no inline script) and refuses to be framed.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException

from common.errors import NotConfigured

# Built by scripts/install-console.sh (make install).
BUNDLE_DIR = Path(__file__).resolve().parent.parent / "console" / "dist"

CSP = ("default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "style-src 'self' 'unsafe-inline'; font-src 'self'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}

router = APIRouter(include_in_schema=False)


@router.get("/console")
async def console_root() -> Response:
    # Relative asset URLs resolve against /console/.
    return RedirectResponse("/console/", status_code=308)


@router.get("/console/")
async def console_index() -> Response:
    return _file(BUNDLE_DIR / "index.html", cache="no-cache")


@router.get("/console/assets/{name}")
async def console_asset(name: str) -> Response:
    # Vite names assets by content hash: a name's content never changes.
    return _file(BUNDLE_DIR / "assets" / name, cache="public, max-age=31536000, immutable")


def _file(path: Path, *, cache: str) -> Response:
    if not (BUNDLE_DIR / "index.html").is_file():
        raise NotConfigured("the console is not built: run `make install` "
                            "(scripts/install-console.sh needs Node.js >= 20.19 with npm)")
    # Asset names are one path segment (the route's parameter): no way out of dist/.
    if not path.is_file() or path.name.startswith("."):
        raise HTTPException(404)
    media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return Response(path.read_bytes(), media_type=media_type,
                    headers={**HEADERS, "Cache-Control": cache})
