# gdb extension
