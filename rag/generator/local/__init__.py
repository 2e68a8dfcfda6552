"""The bundled local model: weights, the llama.cpp server child process, and the per-user model server."""
