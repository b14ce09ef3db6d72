"""`python -m devstack`: run the local stack (what `make dev` does)."""

from devstack.local import main

main()
