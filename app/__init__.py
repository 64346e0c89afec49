"""ledgerd's HTTP service: FastAPI routes, settings, auth and errors around a node.

Public surface::

    from app import create_app, ServiceSettings
"""

from .main import create_app as create_app
from .settings import ServiceSettings as ServiceSettings

__all__ = ["ServiceSettings", "create_app"]
