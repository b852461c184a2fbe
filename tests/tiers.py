"""The suite's two tiers. The default run (`python -m pytest`, the README's test command)
leaves out the tests named here, marked `slow` (tests/conftest.py); `python -m pytest -m
slow` runs them, and CI runs both (.ci/run). Each is named by its full pytest id, with the
seconds its call took in a default run on the project's 2-core machine (two workers): the
calls of 3 s and more, so that the default run stays well under 5 minutes there. The
mutation check runs the tests an entry names whichever tier holds them (devtools/mutants.py
passes `-m ""`)."""

# Modules whose every test is in the second tier: each builds shims or runs drivers of its
# own in nearly every test (its seconds: setup and calls summed over its tests in a default
# run on the 2-core machine under load), so that the default run stays well under 5 minutes
# there as the suite grows. CI runs them in the second tier.
SLOW_MODULES = frozenset({
    'tests/pipeline/test_matrix.py',  # 38 s: every Debian driver's gates and proofs
    'tests/gates/test_initsite.py',  # 37 s
    'tests/devtools/test_benchmarks.py',  # 34 s
    'tests/diff/test_diff_hostile.py',  # 32 s
    'tests/gates/test_gates_verdict.py',  # 32 s
    'tests/gates/test_gate_profiles_cli.py',  # 32 s
    'tests/report/test_few_calls.py',  # 16 s
})

SLOW = frozenset({
    'tests/run/test_run_nvml.py::test_run_preloads_the_nvml_shim_beside_the_libcuda_shim_when_a_limit_is_set',  # 24 s: builds a libcuda shim
    'tests/run/test_run_nvml.py::test_run_preloads_the_nvml_shim_under_a_shared_budget',  # 16 s: three runs
    'tests/runtime/test_inject.py::test_run_refuses_a_bad_rule_before_anything_runs[no-match]',  # 5.8 s
    'tests/runtime/test_gputime.py::test_launches_from_racing_threads_are_each_timed_once',  # 8.2 s
    'tests/runtime/test_aarch64.py::test_a_user_hook_is_cross_compiled_and_reached_by_every_route',  # 5.8 s
    'tests/runtime/test_faults_loading.py::test_attr_override_values_reach_the_program_exactly',  # 4.0 s
    'tests/cli/test_bad_cli.py::test_build_takes_dash_o_as_run_and_patch_do',  # 3.4 s
    'tests/cli/test_bad_cli.py::test_malformed_or_foreign_gate_profile',  # 8.6 s
    'tests/cli/test_cli_inputs.py::test_sigint_at_any_moment_of_shimgens_start_is_never_its_traceback',  # 3.7 s
    'tests/cli/test_cli_start.py::test_sigint_at_any_moment_of_the_start_is_one_line_and_130',  # 7.6 s
    'tests/devtools/test_benchmarks.py::test_gpu_option_reports_the_gpu_bar_as_skipped_without_a_gpu',  # 11.2 s
    'tests/devtools/test_benchmarks.py::test_quick_run_prints_a_table',  # 13.3 s
    'tests/devtools/test_mutants.py::test_all_caught_exits_zero',  # 6.0 s
    'tests/devtools/test_mutants.py::test_caught_survived_and_broken_entries',  # 4.5 s
    'tests/devtools/test_mutants.py::test_every_test_the_list_names_is_collected',  # 16 s
    'tests/devtools/test_mutants.py::test_mutations_at_once_each_in_a_copy_give_the_same_verdicts_in_the_list_order',  # 6 s
    'tests/devtools/test_mutants.py::test_what_the_tests_leave_running_in_the_copy_is_killed',  # 3.0 s
    'tests/devtools/test_mutants.py::test_tests_that_fail_unmutated_and_code_that_does_not_build_are_broken',  # 9.4 s
    'tests/devtools/test_readme.py::test_the_try_it_commands_run_as_written_and_print_what_the_readme_shows',  # 40 s
    'tests/devtools/test_skippolicy.py::test_strict_skips',  # 3.2 s
    'tests/diff/test_diff.py::test_a_driver_against_itself_has_no_differences[550.163.01]',  # 4.7 s
    'tests/diff/test_diff.py::test_a_driver_against_itself_has_no_differences[555.58.02]',  # 3.6 s
    'tests/diff/test_diff.py::test_exports_added_and_removed_are_nm_s[535.261.03-550.163.01]',  # 4.4 s
    'tests/diff/test_diff.py::test_gates_are_each_drivers_profile[535.261.03-550.163.01]',  # 6.8 s
    'tests/diff/test_diff.py::test_gates_are_each_drivers_profile[550.163.01-555.58.02]',  # 4.3 s
    'tests/diff/test_diff_hostile.py::test_a_shim_is_refused_as_either_driver[NEW]',  # 3.5 s
    'tests/diff/test_diff_hostile.py::test_a_shim_is_refused_as_either_driver[OLD]',  # 7.0 s
    'tests/diff/test_diff_short.py::test_verbose_lists_the_names_of_a_group_and_json_keeps_every_span',  # 3.0 s
    'tests/gates/test_gate_init_fake.py::test_init_method_sets_the_bit_in_the_drivers_own_init',  # 4.8 s
    'tests/gates/test_gate_init_fake.py::test_only_a_shim_with_init_sites_can_change_code',  # 4.5 s
    'tests/gates/test_gate_init_fake.py::test_threads_racing_into_cuinit_all_see_the_patched_init',  # 5.9 s
    'tests/gates/test_gate_profiles_cli.py::test_allow_unproven_gates_bakes_and_says_so',  # 4.1 s
    'tests/gates/test_gate_profiles_cli.py::test_json_replaces_an_earlier_profile_whole_and_owner_only',  # 4.7 s
    'tests/gates/test_gate_profiles_cli.py::test_unproven_or_failed_profiles_are_refused',  # 3.1 s
    'tests/gates/test_gate_runtime.py::test_shim_without_gates_refuses_selection',  # 6.0 s
    'tests/gates/test_gates.py::test_cli_json_without_a_file_prints_the_profile_alone',  # 5.9 s
    'tests/gates/test_gates.py::test_cli_writes_a_proven_profile',  # 3.6 s
    'tests/gates/test_gates.py::test_the_driver_is_opened_and_parsed_once',  # 3.7 s
    'tests/gates/test_gates_armed.py::test_armed_and_then_nothing_applied_when_cuinit_fails',  # 5.6 s
    'tests/gates/test_initsite.py::test_a_profile_files_init_change_is_proven_again_at_build',  # 3.7 s
    'tests/gates/test_initsite.py::test_init_method_changes_exactly_the_chosen_bytes_of_a_real_driver[gdr]',  # 3.8 s
    'tests/gates/test_initsite.py::test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads[mask]',  # 6.9 s
    'tests/gates/test_initsite.py::test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads[set]',  # 18.0 s
    'tests/gates/test_initsite.py::test_patch_refuses_an_output_that_is_not_its_own_directory',  # 8.9 s
    'tests/gates/test_initsite.py::test_patch_refuses_foreign_and_already_patched_files',  # 10.9 s
    'tests/gates/test_initsite.py::test_patch_site_selects_one_instruction',  # 5.3 s
    'tests/gates/test_p2p_gate.py::test_diff_names_the_p2p_sites_of_both_drivers',  # 9.0 s
    'tests/gates/test_p2p_gate.py::test_gates_json_has_the_p2p_gate_and_a_changed_byte_is_proven_again',  # 3.9 s
    'tests/gates/test_p2p_gate.py::test_patch_p2p_copy_changes_the_branches_and_loads',  # 10.9 s
    'tests/gates/test_p2p_gate.py::test_shim_changes_the_branches_in_memory_with_the_init_method_only',  # 9.2 s
    'tests/gates/test_patch_messages.py::test_a_gate_without_an_init_site_names_the_way_that_works',  # 4.5 s
    'tests/gates/test_patch_messages.py::test_a_patched_copy_is_already_patched_with_or_without_a_profile',  # 6.0 s
    'tests/gates/test_patch_messages.py::test_a_p2p_proof_that_failed_refuses_the_p2p_gate_alone',  # 26 s under a load of 12: discovery and the proof
    'tests/gates/test_patch_messages.py::test_a_profile_without_the_gates_init_changes_is_refused_naming_the_way_that_works',  # 6 s: a profile made first
    'tests/pipeline/test_bad_output.py::test_concurrent_builds_into_one_place',  # 22.2 s
    'tests/pipeline/test_bad_output.py::test_disk_full_during_build_keeps_previous',  # 5.7 s
    'tests/pipeline/test_bad_output.py::test_install_without_directory_swap',  # 5.6 s
    'tests/pipeline/test_bad_output.py::test_interrupted_build_keeps_previous[group-2]',  # 6.7 s
    'tests/pipeline/test_bad_output.py::test_interrupted_build_keeps_previous[process-15]',  # 6.0 s
    'tests/pipeline/test_bad_output.py::test_interrupted_build_keeps_previous[process-1]',  # 6.6 s
    'tests/pipeline/test_bad_output.py::test_interrupted_build_keeps_previous[process-2]',  # 6.5 s
    'tests/pipeline/test_bad_output.py::test_read_only_output_root',  # 4.0 s
    'tests/pipeline/test_bad_output.py::test_rebuild_swaps_the_whole_directory',  # 5.8 s
    'tests/pipeline/test_bad_output.py::test_signal_during_install_is_held_back',  # 3.0 s
    'tests/pipeline/test_bad_output.py::test_stale_staging_is_removed_live_one_kept',  # 3.1 s
    'tests/pipeline/test_fuzz.py::test_fuzz_elf_reading',  # 12.4 s
    'tests/pipeline/test_packaging.py::test_wheel_builds_without_warnings_and_carries_templates_and_runtime',  # 4.0 s
    'tests/pipeline/test_units.py::test_failed_build_keeps_previous_good_build',  # 4.4 s
    'tests/pipeline/test_units.py::test_path_with_comment_terminator_still_builds',  # 3.7 s
    'tests/probe/test_p2p.py::test_report_p2p_side_by_side_with_the_shim',  # 9.5 s
    'tests/report/test_compare_modes.py::test_a_time_run_against_a_counts_run',  # 3.8 s
    'tests/report/test_report.py::test_real_traces_of_a_forking_program_are_merged[trace.%p.json]',  # 9.9 s
    'tests/report/test_report_trust_run.py::test_the_shims_warning_is_in_the_report_at_the_end',  # 3.8 s
    'tests/report/test_calls_hostile_more.py::test_a_trace_cut_or_zeroed_at_any_byte_is_said_never_a_traceback[calls]',  # 63 s
    'tests/report/test_calls_hostile_more.py::test_a_trace_cut_or_zeroed_at_any_byte_is_said_never_a_traceback[time]',  # 5.2 s
    'tests/report/test_top_functions.py::test_top_shows_a_running_jobs_hottest_functions',  # 15 s
    'tests/run/test_cache_trust.py::test_a_bad_entry_is_replaced_without_following_its_symlinks',  # 3.7 s
    'tests/run/test_cache_trust.py::test_a_library_changed_in_place_is_rebuilt_never_run[as-written]',  # 6.6 s
    'tests/run/test_cache_trust.py::test_a_library_changed_in_place_is_rebuilt_never_run[mtime-put-back]',  # 8.3 s
    'tests/run/test_cache_trust.py::test_a_library_cut_short_is_rebuilt_before_it_is_read',  # 4.5 s
    'tests/run/test_cache_trust.py::test_a_library_sealed_without_its_stat_is_hashed_at_each_use',  # 4.5 s
    'tests/run/test_cache_trust.py::test_a_library_touched_but_unchanged_is_checked_by_its_digest_and_used',  # 3.9 s
    'tests/run/test_cache_trust.py::test_a_seal_is_taken_once_the_clock_is_past_the_library',  # 3.5 s
    'tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded[another-users-entry]',  # 3.6 s
    'tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded[library-a-symlink]',  # 3.8 s
    'tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded[library-another-users-copy]',  # 3.8 s
    'tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded[library-open-to-others]',  # 4.4 s
    'tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded[manifest-another-users-copy]',  # 4.1 s
    'tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded[manifest-open-to-others]',  # 3.6 s
    'tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded[open-to-others]',  # 4.1 s
    'tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded[planted-in-an-open-entry]',  # 4.3 s
    'tests/run/test_cache_trust.py::test_an_entry_without_a_digest_is_rebuilt',  # 4.4 s
    'tests/run/test_cache_trust.py::test_everything_the_cache_makes_is_private_under_umask_0',  # 4.0 s
    'tests/run/test_cache_trust.py::test_the_seal_is_the_librarys_digest_and_stat',  # 3.7 s
    'tests/run/test_pool_race.py::test_racing_threads_pools_are_each_their_devices_and_all_gone_at_the_end',  # 3.7 s: 60 runs
    'tests/run/test_cuda11_driver.py::test_a_hook_is_reached_through_the_first_cu_get_proc_address',  # 5.5 s
    'tests/run/test_cuda11_driver.py::test_cuda_11_runtime_fills_its_driver_table_through_the_shim',  # 4.5 s
    'tests/run/test_cuda11_driver.py::test_diff_against_cuda_12_says_what_470_has_not',  # 8.2 s
    'tests/run/test_cuda11_driver.py::test_patch_masks_gdr_and_refuses_dmabuf_saying_why',  # 5.7 s
    'tests/run/test_first_build.py::test_build_says_what_it_builds_first_and_nothing_more_on_a_pipe',  # 3.8 s
    'tests/run/test_first_build.py::test_build_shows_its_steps_on_a_terminal_and_erases_them',  # 3.6 s
    'tests/run/test_first_build.py::test_first_run_says_it_builds_before_it_does_and_a_cached_run_does_not',  # 3.7 s
    'tests/run/test_inflight.py::test_stall_is_said_once_when_a_call_lasts_and_again_when_it_ends',  # 3.7 s
    'tests/run/test_inflight.py::test_the_same_race_read_thousands_of_times',  # 22 s
    'tests/run/test_memory_nogpu.py::test_a_limit_the_driver_never_let_act_is_said_as_untried',  # 11 s
    'tests/run/test_budget.py::test_a_job_of_64_processes_never_takes_the_driver_past_its_budget',  # 16 s
    'tests/run/test_run.py::test_a_terminals_ctrl_c_reaches_the_command_once',  # 4.8 s
    'tests/run/test_run.py::test_signals_sent_to_run_reach_the_command_exactly_once',  # 41.0 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[entry-a-symlink]',  # 5.1 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[library-another-file]',  # 5.4 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[library-cut-short]',  # 6.0 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[library-missing]',  # 6.5 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[manifest-another-key]',  # 5.2 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[manifest-missing]',  # 5.2 s
    'tests/run/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used[manifest-not-json]',  # 5.2 s
    'tests/run/test_run_cache.py::test_an_entry_copied_under_another_drivers_key_is_rebuilt_not_used',  # 8.0 s
    'tests/run/test_run_cache.py::test_build_keeps_gated_and_plain_builds_apart',  # 5.5 s
    'tests/run/test_run_cache.py::test_first_runs_at_once_build_once',  # 10.9 s
    'tests/run/test_run_cache.py::test_gated_and_plain_shims_live_side_by_side',  # 9.4 s
    'tests/run/test_run_cache.py::test_the_cached_path_imports_nothing_heavy',  # 3.5 s
    'tests/run/test_run_cache.py::test_the_default_driver_is_remembered_until_the_loader_cache_changes',  # 4.9 s
    'tests/run/test_run_cache.py::test_the_second_run_builds_nothing',  # 4.3 s
    'tests/run/test_run_safety.py::test_sigterm_to_the_group_at_any_moment_is_said_truly',  # 3.3 s
    'tests/run/test_calls_sigkill.py::test_sigkill_while_sixteen_threads_wrap_their_rings',  # 77 s
    'tests/run/test_userhooks.py::test_run_rebuilds_when_the_hook_file_changes',  # 8.8 s
    'tests/run/test_userhooks.py::test_summary_names_hooks_and_other_variants',  # 3.8 s
    'tests/run/test_userhooks_trust.py::test_a_builds_copy_of_a_hook_file_is_never_more_readable[384]',  # 3.4 s
    'tests/run/test_userhooks_trust.py::test_a_builds_copy_of_a_hook_file_is_never_more_readable[416]',  # 3.5 s
    'tests/runtime/test_aarch64.py::test_run_of_an_aarch64_program_reports_its_calls',  # 4.9 s
    'tests/runtime/test_aarch64.py::test_threads_racing_the_first_calls_are_each_counted_once',  # 14.7 s
    'tests/runtime/test_aarch64_timing.py::test_arguments_results_and_registers_through_every_stub[1]',  # 0.4 s
    'tests/runtime/test_aarch64_timing.py::test_arguments_results_and_registers_through_every_stub[timeline]',  # 5.6 s
    'tests/runtime/test_aarch64_timing.py::test_a_forked_child_times_only_its_own_calls',  # 0.6 s: the rest of the aarch64 set
    'tests/runtime/test_aarch64_timing.py::test_a_signal_handlers_calls_inside_timeline_calls',  # 1.1 s
    'tests/runtime/test_aarch64_timing.py::test_coroutines_in_every_order[time-fifo]',  # 0.3 s
    'tests/runtime/test_aarch64_timing.py::test_coroutines_in_every_order[time-lifo]',  # 0.3 s
    'tests/runtime/test_aarch64_timing.py::test_coroutines_in_every_order[time-random]',  # 0.3 s
    'tests/runtime/test_aarch64_timing.py::test_coroutines_in_every_order[timeline-fifo]',  # 0.5 s
    'tests/runtime/test_aarch64_timing.py::test_coroutines_in_every_order[timeline-lifo]',  # 0.6 s
    'tests/runtime/test_aarch64_timing.py::test_coroutines_in_every_order[timeline-random]',  # 0.7 s
    'tests/runtime/test_aarch64_timing.py::test_exceptions_cross_a_timeline_call',  # 0.1 s
    'tests/runtime/test_aarch64_timing.py::test_threads_race_for_the_blocks_of_exited_threads',  # 3.3 s
    'tests/runtime/test_aarch64_timing.py::test_threads_racing_their_first_timed_calls_hundreds_of_times',  # 16.8 s
    'tests/runtime/test_aarch64_fine_full.py::test_calls_the_fine_table_cannot_hold_are_in_the_log2_histogram_on_aarch64',  # 0.2 s, its module's setup 3.9 s: a fake and shim cross-built of its own
    'tests/runtime/test_calls.py::test_text_lines_and_filters',  # 5.2 s (load 10)
    'tests/runtime/test_calls.py::test_two_runs_first_difference',  # 4.3 s (load 10)
    'tests/runtime/test_errors.py::test_error_path_interrupted_by_failing_calls_in_a_signal_handler',  # 5.1 s
    'tests/runtime/test_faults_driver.py::test_changed_driver_forwards_by_name_and_says_so_once[replaced-in-place]',  # 4.8 s
    'tests/runtime/test_faults_files.py::test_shim_imports_nothing_that_changes_files_or_memory_protection',  # 3.3 s
    'tests/runtime/test_faults_loading.py::test_fork_while_another_thread_loads_the_real_driver',  # 3.5 s
    'tests/runtime/test_faults_output.py::test_killed_while_writing_leaves_previous_or_whole_file[named-temp]',  # 9.4 s
    'tests/runtime/test_faults_output.py::test_killed_while_writing_leaves_previous_or_whole_file[unnamed-temp]',  # 9.7 s
    'tests/runtime/test_faults_timing.py::test_threads_that_leave_a_timed_call_and_exit_are_reclaimed[timeline-throw]',  # 3.1 s
    'tests/runtime/test_guards.py::test_after_a_driver_upgrade_a_path_to_the_new_driver_opens_the_shim',  # 3.6 s
    'tests/runtime/test_inject.py::test_run_inject_records_and_reports',  # 3.5 s
    'tests/runtime/test_inject.py::test_unmatched_and_unset_cost_nothing',  # 3.9 s
    'tests/runtime/test_races.py::test_threads_race_for_freed_blocks',  # 10.6 s
    'tests/runtime/test_shim.py::test_driver_upgrade_after_build_loads_the_new_driver',  # 3.3 s
    'tests/runtime/test_tracefile.py::test_signal_handler_calls_during_first_calls_are_in_the_file[main]',  # 3.7 s
    'tests/runtime/test_tracefile.py::test_sixty_four_first_calls_at_once_make_one_file',  # 6.2 s
})
