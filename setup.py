"""Maps the repository's folders onto the one import package, `m2mc`, and builds the compiled cores
(the S_b orderer, the Merkle trees); everything else is in pyproject.toml.

The extensions are optional: without a C compiler (or OpenSSL's headers) the install
still succeeds, and m2mc.middleware.mop and m2mc.middleware.crypto fall back to pure Python.
"""

from setuptools import Extension, find_packages, setup

# The repository keeps app/, ui/ and middleware/ at its top level; installed, they are m2mc.app,
# m2mc.ui and m2mc.middleware. The root package's own __init__ lives in packaging/m2mc/.
FOLDERS = {"m2mc.app": "app", "m2mc.ui": "ui", "m2mc.middleware": "middleware"}
PACKAGE_DIR = {"m2mc": "packaging/m2mc", **FOLDERS}
PACKAGES = ["m2mc"] + [
    f"{package}.{sub}" if sub else package
    for package, folder in FOLDERS.items()
    for sub in ["", *find_packages(folder)]
]

COMPILE_ARGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Wno-cast-function-type"]

setup(
    package_dir=PACKAGE_DIR,
    packages=PACKAGES,
    ext_modules=[
        Extension("m2mc.middleware._sborder", ["middleware/_sborder.c"], optional=True, extra_compile_args=COMPILE_ARGS),
        Extension("m2mc.middleware._merkle", ["middleware/_merkle.c"], optional=True, extra_compile_args=COMPILE_ARGS,
                  libraries=["crypto"]),
    ]
)
