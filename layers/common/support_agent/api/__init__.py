"""HTTP adapters: Powertools resolvers, the error contract, request and response models.

Importing this package makes Powertools' ``event_handler`` and ``utilities.data_classes`` packages lazy
(lazy_packages.py), so a function imports the one resolver and event class it uses, not all of them.
"""

from support_agent.api.lazy_packages import lazy_package

lazy_package("aws_lambda_powertools.event_handler")
lazy_package("aws_lambda_powertools.utilities.data_classes")
