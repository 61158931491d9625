# lit configuration for mpmd's MLIR tests (mpmd-opt + FileCheck).
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "MPMD"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mpmd_obj_root, "test")
config.excludes = ["python", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]

llvm_config.with_system_environment(["HOME", "TMP", "TEMP"])
llvm_config.use_default_substitutions()
tool_dirs = [config.mpmd_tools_dir, os.path.join(config.mpmd_obj_root, "test", "Unit"),
             config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["mpmd-opt", "mpmd-common-tests", "FileCheck", "not", "count"], tool_dirs)
