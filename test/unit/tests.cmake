add_test(unit_route "${B}/test/unit/test_route")
set_tests_properties(unit_route PROPERTIES LABELS "unit" TIMEOUT 60)
