"""Builds the compiled cores (the S_b orderer, the Merkle trees); everything else is in pyproject.toml.

The extensions are optional: without a C compiler (or OpenSSL's headers) the install
still succeeds, and middleware.mop and middleware.crypto fall back to pure Python.
"""

from setuptools import Extension, setup

COMPILE_ARGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Wno-cast-function-type"]

setup(
    ext_modules=[
        Extension("middleware._sborder", ["middleware/_sborder.c"], optional=True, extra_compile_args=COMPILE_ARGS),
        Extension("middleware._merkle", ["middleware/_merkle.c"], optional=True, extra_compile_args=COMPILE_ARGS,
                  libraries=["crypto"]),
    ]
)
