"""`python -m devstack.simulated_stripe [--host H] [--port P]`: the simulated Stripe on its own."""

from devstack.simulated_stripe.server import main

main()
