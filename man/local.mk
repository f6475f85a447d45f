# man fragment, included by the top Makefile.am
