"""Builds the S_b orderer's compiled core; everything else is in pyproject.toml.

The extension is optional: without a C compiler the install still succeeds and
middleware.mop falls back to its pure-Python orderer.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "middleware._sborder",
            ["middleware/_sborder.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
        )
    ]
)
