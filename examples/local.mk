# examples fragment, included by the top Makefile.am
