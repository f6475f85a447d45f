# bench fragment, included by the top Makefile.am
