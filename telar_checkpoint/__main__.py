"""`python -m telar_checkpoint`: the `telar-checkpoint` command line."""

from telar_checkpoint.cli import main

raise SystemExit(main())
