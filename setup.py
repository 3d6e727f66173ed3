from setuptools import find_packages, setup

setup(
  name="lazytensor",
  version="0.1.0",
  description="A small lazy tensor framework whose kernels are generated, optimized and searched",
  long_description=open("README.md").read(),
  long_description_content_type="text/markdown",
  packages=find_packages(include=["lazytensor", "lazytensor.*"]),
  # DEV=CUDACPU compiles kernels against these CUDA headers for the CPU, and builds its runtime from runtime.cpp; VIZ's
  # page is a template
  package_data={"lazytensor.runtime": ["cudacpu/*.h", "cudacpu/*.cpp"], "lazytensor.viz": ["page.html"]},
  python_requires=">=3.10",
  install_requires=["numpy", "llvmlite", "tqdm"],
  extras_require={
    "test": ["pytest", "pytest-xdist", "hypothesis", "ruff", "mypy", "safetensors", "scikit-learn"],
    "cuda": ["pycuda"],
    "mpi": ["mpi4py", "mpich"],
  },
)
