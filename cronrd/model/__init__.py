"""The vocabulary every layer of the core speaks: a run as it travels
(``Run``, a frozen value) and the replicated states of a run and their
table (``run_states``). Nothing here reads the state, a clock or a file;
state/ stores these values, decisions/ decides on them, the runtime carries
them."""
