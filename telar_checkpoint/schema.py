"""State-schema migrations, one import path for the whole feature::

    from telar_checkpoint.schema import Schema, rename_channel, upgrade

`Schema` and its steps (`rename_channel`, `map_channel`, ...) are the pure core
(`telar_checkpoint.state_schema`), which a saver made with ``schema=`` reads threads through;
`upgrade`, `aupgrade` and `status` the offline tool that rewrites every thread of a store now
(`telar_checkpoint.schema_upgrade`). docs/SCHEMA.md says more.
"""

from telar_checkpoint.schema_upgrade import SchemaStatus, SchemaUpgrade, aupgrade, status, upgrade
from telar_checkpoint.state_schema import *  # noqa: F403  (the core's names, as its __all__ lists them)
from telar_checkpoint.state_schema import __all__ as _core

__all__ = [*_core, "SchemaStatus", "SchemaUpgrade", "aupgrade", "status", "upgrade"]
