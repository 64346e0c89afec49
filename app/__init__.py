"""ledgerd's HTTP service: FastAPI routes, settings, auth and errors around a node.

Public surface::

    from app import create_app, ServiceSettings, uvicorn_options
"""

from .main import create_app as create_app
from .main import uvicorn_options as uvicorn_options
from .settings import ServiceSettings as ServiceSettings

__all__ = ["ServiceSettings", "create_app", "uvicorn_options"]
