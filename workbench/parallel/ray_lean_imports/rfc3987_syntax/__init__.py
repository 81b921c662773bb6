"""Stands in for the ``rfc3987_syntax`` package in the processes of a Ray that workbench starts.

``import ray`` imports jsonschema (for runtime-env schemas), and jsonschema imports ``rfc3987_syntax``
when it is installed (JupyterLab's dependencies bring it) to check the ``iri`` string format. That
package builds an Earley parser of the RFC 3987 grammar at import: about 1.2 CPU seconds in every
Ray process (node services and every actor), twice what the rest of ``import ray`` costs. Ray
never checks that format, and jsonschema treats a failed import as "format not checked", so in
those processes this folder comes first on ``PYTHONPATH`` and the import fails at once. The
package is untouched everywhere else (the driver, the user's own processes).
"""

raise ImportError("rfc3987_syntax is skipped in workbench's Ray processes (see workbench/parallel/ray_lean_imports)")
