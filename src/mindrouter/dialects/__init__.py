"""Client dialects: the wire formats clients speak, decoded into and encoded from canonical form.

Pure code: no web framework, HTTP client or storage imports; time and ids come in as parameters.
"""
