# tests fragment, included by the top Makefile.am
