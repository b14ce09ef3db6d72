"""The tools the model may propose. Each validates its input and decides for itself."""
