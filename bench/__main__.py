"""`python -m bench`: the outage benchmark; the others run as `python -m bench.<name>` (see `make bench`)."""

from __future__ import annotations

from bench.outage import main

raise SystemExit(main())
