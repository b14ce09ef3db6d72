"""Customer-support agent: the bounded tool-use loop, its tools, stores and auth."""
