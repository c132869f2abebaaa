"""Local development services (object storage, Redis) started by `make run` and the tests.

Plain Python, no Django import: the test suite and the dev launcher both use them.
"""
