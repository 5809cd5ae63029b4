"""The ``shockwave`` command: parse arguments, call one function, render the result."""
