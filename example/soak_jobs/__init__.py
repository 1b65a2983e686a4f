"""Jobs only the chaos soak runs (example/soak.py adds them to its catalog): written the way a new team writes
its first jobs, so the soak proves the runtime's promises for code this project didn't write. The runtime never
names them."""
