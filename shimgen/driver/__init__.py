"""The driver: reading a libcuda file and saying what it is.

notes.py is the light part (the path's text, the one opening and check of a driver file, its
ELF notes and build id, the version in its name: nothing heavy, for `run`'s cached path);
elf.py reads the whole ELF image (pyelftools); library.py says what counts as a libcuda and
which one the dynamic loader would pick; nvml.py has NVML's facts (libnvidia-ml) and says
what counts as one.
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "DriverImage": "elf",
    "EHDR": "notes",
    "ARCHES": "notes",
    "NT_GNU_BUILD_ID": "notes",
    "PHDR": "notes",
    "PT_NOTE": "notes",
    "check_driver": "notes",
    "check_path_text": "notes",
    "library_arch": "notes",
    "check_libcuda": "library",
    "check_nvml": "nvml",
    "default_driver": "library",
    "default_nvml": "nvml",
    "is_nvml": "nvml",
    "nvml": "nvml:",
    "known_version": "library",
    "read_build_id": "notes",
    "read_driver": "library",
    "read_nvml": "nvml",
    "read_image": "elf",
    "refuse_older": "library",
    "version_from_name": "notes",
})
