"""The build pipeline: a driver in, a built shim out. model.py makes the model of the
shim from the driver (with hooks.py's table, the user's hooks of userhooks.py and the gates'
plan), render.py renders the templates, build.py builds them with meson (install.py: the
output directory, checked, locked and swapped whole), pipeline.py runs the three for
`shimgen build` and the cache alike; inject.py is the fault rules' grammar
that the shim's own parser shares; exports.py is `shimgen exports`, the functions a shim
forwards.
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "check_not_a_shim": "model",
    "command": "pipeline:command",
    "default_output_root": "model",
    "file_digest": "userhooks",
    "header_command": "userhooks:header_command",
    "inject": "inject:",
    "list_exports": "exports:command",
    "make_nvml_shim": "nvml",
    "make_shim": "pipeline",
    "sources_stamp": "sources:stamp",
    "userhooks": "userhooks:",
})
