"""The framework-neutral training core: loop, callbacks, schedules, data as numpy.

Nothing here imports torch, tensorflow, celery or the database; back-ends live in
training/torch and training/tf and are imported lazily by backend.get_backend.
"""
