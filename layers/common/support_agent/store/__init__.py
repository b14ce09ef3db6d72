"""DynamoDB repositories. Every key that holds customer data starts with the customer id."""
