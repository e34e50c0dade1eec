"""The analytics wing: exported chat logs in, conversation-thread statistics and a report out.

`m2mc-thread-stats` (the PySpark job and its report), its plain-Python reference, the log
generator and the driver JVM's class archive. Nothing here imports the GUI or the middleware:
the export's JSON Lines format is the only contract between them.
"""
