"""Only the C part of the build; everything else is in pyproject.toml.

The record decoder's fast path (brokers/record/_records.c) is optional: where
it cannot be compiled, Tideway runs on the Python decoder it mirrors.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("brokers.record._records", ["brokers/record/_records.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"])])
