"""State-schema migrations, one import path for the whole feature::

    from telar_checkpoint.schema import Schema, rename_channel, upgrade

`Schema` and its steps (`rename_channel`, `map_channel`, ...) are the pure core
(`telar_checkpoint.state_schema`), which a saver made with ``schema=`` reads threads through;
`upgrade`, `aupgrade` and `status` the offline tool that rewrites every thread of a store now
(`telar_checkpoint.schema_upgrade`). docs/SCHEMA.md says more.
"""

from telar_checkpoint.schema_upgrade import SchemaStatus, SchemaUpgrade, aupgrade, status, upgrade
from telar_checkpoint.state_schema import (
    Schema,
    SchemaError,
    SchemaRefusedError,
    SchemaStepError,
    SchemaVersionError,
    drop_channel,
    load_schema,
    map_channel,
    rename_channel,
    rename_class,
    rename_node,
    transform,
    upgrade_history,
    upgrade_text,
)

__all__ = [
    "Schema",
    "SchemaError",
    "SchemaRefusedError",
    "SchemaStatus",
    "SchemaStepError",
    "SchemaUpgrade",
    "SchemaVersionError",
    "aupgrade",
    "drop_channel",
    "load_schema",
    "map_channel",
    "rename_channel",
    "rename_class",
    "rename_node",
    "status",
    "transform",
    "upgrade",
    "upgrade_history",
    "upgrade_text",
]
