"""The suite's two tiers. The default run (`python -m pytest`, the README's test command)
leaves out the tests named here, marked `slow` (tests/conftest.py); `python -m pytest -m
slow` runs them, and CI runs both (.ci/run). Each is named by its full pytest id, with the
CPU seconds it took on the project's 2-core machine. They are the suite's most costly
tests that no entry of devtools/mutations.py names: a test that catches a listed mistake
stays in the default run (tests/devtools/test_layout.py checks both rules), so the mutation
check runs only default tests."""

SLOW = frozenset({
    'tests/cli/test_cli_start.py::test_sigint_at_any_moment_of_the_start_is_one_line_and_130',  # 7.6 s
    'tests/devtools/test_benchmarks.py::test_gpu_option_reports_the_gpu_bar_as_skipped_without_a_gpu',  # 11.2 s
    'tests/devtools/test_benchmarks.py::test_quick_run_prints_a_table',  # 13.3 s
    'tests/devtools/test_mutants.py::test_all_caught_exits_zero',  # 6.0 s
    'tests/devtools/test_mutants.py::test_caught_survived_and_broken_entries',  # 4.5 s
    'tests/devtools/test_mutants.py::test_tests_that_fail_unmutated_and_code_that_does_not_build_are_broken',  # 9.4 s
    'tests/devtools/test_readme.py::test_the_try_it_commands_run_as_written_and_print_what_the_readme_shows',  # 40 s
    'tests/gates/test_gate_init_fake.py::test_init_method_sets_the_bit_in_the_drivers_own_init',  # 4.8 s
    'tests/gates/test_gate_init_fake.py::test_threads_racing_into_cuinit_all_see_the_patched_init',  # 5.9 s
    'tests/gates/test_gate_profiles_cli.py::test_allow_unproven_gates_bakes_and_says_so',  # 4.1 s
    'tests/gates/test_initsite.py::test_init_method_changes_exactly_the_chosen_bytes_of_a_real_driver[gdr]',  # 3.8 s
    'tests/pipeline/test_bad_output.py::test_disk_full_during_build_keeps_previous',  # 5.7 s
    'tests/pipeline/test_bad_output.py::test_install_without_directory_swap',  # 5.6 s
    'tests/pipeline/test_bad_output.py::test_interrupted_build_keeps_previous[group-2]',  # 6.7 s
    'tests/pipeline/test_bad_output.py::test_interrupted_build_keeps_previous[process-15]',  # 6.0 s
    'tests/pipeline/test_bad_output.py::test_interrupted_build_keeps_previous[process-1]',  # 6.6 s
    'tests/pipeline/test_bad_output.py::test_interrupted_build_keeps_previous[process-2]',  # 6.5 s
    'tests/pipeline/test_bad_output.py::test_read_only_output_root',  # 4.0 s
    'tests/pipeline/test_bad_output.py::test_rebuild_swaps_the_whole_directory',  # 5.8 s
    'tests/pipeline/test_fuzz.py::test_fuzz_elf_reading',  # 12.4 s
    'tests/probe/test_p2p.py::test_report_p2p_side_by_side_with_the_shim',  # 9.5 s
    'tests/report/test_report.py::test_real_traces_of_a_forking_program_are_merged[trace.%p.json]',  # 9.9 s
    'tests/run/test_cache_trust.py::test_a_library_changed_in_place_is_rebuilt_never_run[as-written]',  # 6.6 s
    'tests/run/test_cache_trust.py::test_a_library_sealed_without_its_stat_is_hashed_at_each_use',  # 4.5 s
    'tests/run/test_cache_trust.py::test_everything_the_cache_makes_is_private_under_umask_0',  # 4.0 s
    'tests/run/test_cuda11_driver.py::test_a_hook_is_reached_through_the_first_cu_get_proc_address',  # 5.5 s
    'tests/run/test_cuda11_driver.py::test_patch_masks_gdr_and_refuses_dmabuf_saying_why',  # 5.7 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[entry-a-symlink]',  # 5.1 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[library-another-file]',  # 5.4 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[library-cut-short]',  # 6.0 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[library-missing]',  # 6.5 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[manifest-another-key]',  # 5.2 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[manifest-missing]',  # 5.2 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[manifest-not-json]',  # 5.2 s
    'tests/run/test_run_cache.py::test_build_keeps_gated_and_plain_builds_apart',  # 5.5 s
    'tests/runtime/test_errors.py::test_error_path_interrupted_by_failing_calls_in_a_signal_handler',  # 5.1 s
    'tests/runtime/test_faults_output.py::test_killed_while_writing_leaves_previous_or_whole_file[named-temp]',  # 9.4 s
    'tests/runtime/test_faults_output.py::test_killed_while_writing_leaves_previous_or_whole_file[unnamed-temp]',  # 9.7 s
})
