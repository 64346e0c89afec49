"""ledgerd's HTTP service: FastAPI routes, settings, auth, errors, lifespan and CLI.

Public surface::

    from app import create_app, ServiceSettings, SettingsError, GcControl, OffloadControl
"""

from .controls import GcControl as GcControl
from .controls import OffloadControl as OffloadControl
from .main import create_app as create_app
from .settings import ServiceSettings as ServiceSettings
from .settings import SettingsError as SettingsError
