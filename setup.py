"""Maps the top-level folders onto the ``memstream`` package; metadata lives in pyproject.toml."""

from setuptools import find_packages, setup

FOLDERS = ("domain", "projections", "workers", "cli")

package_dir = {"memstream": "memstream"}
packages = ["memstream", *("memstream." + p for p in find_packages(where="memstream"))]
for folder in FOLDERS:
    for found in [folder, *(folder + "." + p for p in find_packages(where=folder))]:
        name = "memstream." + found
        package_dir[name] = found.replace(".", "/")
        packages.append(name)

setup(package_dir=package_dir, packages=packages)
