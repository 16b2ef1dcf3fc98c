"""The Dask side of every job: the functions tasks run and the graphs that call them.

Plans become graphs (blocks computed inside the task that uses them, piece
tasks where blocks straddle shards), streamed to the scheduler wave by wave;
progress bars and the reports that tasks return are here too.
"""
