"""`python -m devstack.simulated_model [--host H] [--port P]`: the simulated model on its own."""

from devstack.simulated_model.server import main

main()
