"""`python -m bench`: the outage benchmark (the only one so far)."""

from __future__ import annotations

from bench.outage import main

raise SystemExit(main())
