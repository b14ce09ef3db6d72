"""HTTP adapters: Powertools resolvers, the error contract, request and response models."""
