// doctest's main for the property binaries (property_tests and property_mutants).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
