"""One module per ``shardpipe`` command: its parser (``add_command``) and what runs it (``run``).

Each module names its command (``NAME``), says what it does in one line
(``SUMMARY``, listed by ``shardpipe --help``) and in more words
(``DETAILS``), adds its parser with
:func:`shardpipe.cli.subcommand.add_subcommand` and its options (the
shared ones from :mod:`shardpipe.cli.options`), and runs the command in
``run(args) -> int``, which returns the exit status. Imports that only
running needs stay inside ``run``, so that ``shardpipe --help`` starts fast.
"""
