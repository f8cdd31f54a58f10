"""Stand-in for the `openai` Python package, put on PYTHONPATH by
tests/compat/llamacpp-suite.sh only when the real package cannot be
imported (Debian has none and PyPI is not reachable from this project's
machines). llama.cpp's server tests import it at the top of five files; a
handful of their tests drive the official client. This module lets the
other tests of those files run, and marks each test that would use the
client as skipped, saying why; it answers no request itself. (The official
OpenAI SDK is exercised against muser by tests/e2e/test_serve_openai_sdk.sh,
through its npm package.)"""
import pytest


class OpenAI:
    def __init__(self, *args, **kwargs):
        pytest.skip("the openai Python package is not installed (tests/compat/pystub stands in)")


class AsyncOpenAI(OpenAI):
    pass


class OpenAIError(Exception):
    pass


class APIError(OpenAIError):
    pass


class BadRequestError(APIError):
    pass
