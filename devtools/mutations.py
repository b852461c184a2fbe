"""The must-catch mutations, checked by `python -m devtools.mutants` (in CI, from .ci/run):
small, plausible mistakes in the code, each with the tests that must fail on it.

Each entry: `name`; `file` (relative to the repository root); `old`, the exact text to
replace, which must occur exactly once in the file (otherwise the entry is broken and the
check fails: keep this list in step with the code); `new`, its replacement; `tests`, the
pytest ids that must all fail (an id without parameters: at least one of its cases); `why`,
the promise that the mistake would break. Keep each entry's tests few and targeted: the
whole list runs in CI.
"""

MUTATIONS = [
    # ---- gate identity at build time: every instruction a profile records ----
    {
        "name": "gates-build-init-sites-unchecked",
        "file": "shimgen/gates/plan.py",
        "old": "    verify_profile_against_image(profile, image)\n",
        "new": "",
        "tests": ["tests/test_gate_runtime.py::test_real_profile_with_one_byte_changed_is_refused"
                  "_by_build[init-site]"],
        "why": "a profile is refused unless every instruction it records is in the driver",
    },
    # ---- timed calls that end in any order (runtime/timing.S) ----
    {
        "name": "timing-frame-not-linked-back",
        "file": "runtime/timing.S",
        "old": "        mov     %rdx, FRAME_NEXT(%rsi)\n",
        "new": "",
        "tests": ["tests/test_faults_timing.py::test_coroutines_suspended_inside_driver_calls"],
        "why": "coroutines suspended inside timed calls return to the right place, counted",
    },
    # ---- valid JSON for any path (runtime/output.c) ----
    {
        "name": "json-quote-not-escaped",
        "file": "runtime/output.c",
        "old": "if (*p == '\"' || *p == '\\\\') {",
        "new": "if (*p == '\\\\') {",
        "tests": ["tests/test_faults_output.py::test_any_driver_path_gives_valid_json"],
        "why": "every trace and timeline is valid JSON whatever the driver's path holds",
    },
    # ---- gate identity at run time (runtime/gates.c) ----
    {
        "name": "gates-run-first-window-only",
        "file": "runtime/gates.c",
        "old": "for (unsigned i = 0; i < plan->nchecks; i++) {",
        "new": "for (unsigned i = 0; i < plan->nchecks && i < 1; i++) {",
        "tests": ["tests/test_gate_runtime.py::test_a_window_other_than_the_first_is_checked"],
        "why": "no write to driver memory unless every recorded instruction window matches",
    },
    {
        "name": "gates-run-first-byte-of-each-window",
        "file": "runtime/gates.c",
        "old": "plan->checks[i].len) != 0) {",
        "new": "1) != 0) {",
        "tests": ["tests/test_gate_runtime.py::test_a_window_other_than_the_first_is_checked"
                  "[last-byte-of-last-window]"],
        "why": "every recorded byte is compared, not only the first of a window",
    },
    {
        "name": "gates-run-no-byte-check",
        "file": "runtime/gates.c",
        "old": "for (unsigned i = 0; i < plan->nchecks; i++) {",
        "new": "for (unsigned i = 0; i < 0; i++) {",
        "tests": ["tests/test_gate_runtime.py::test_mismatched_driver_writes_nothing[bytes]",
                  "tests/test_gate_runtime.py::test_a_window_other_than_the_first_is_checked"],
        "why": "a driver with the right build-id but other code is not written to",
    },
    {
        "name": "gates-run-no-build-id-check",
        "file": "runtime/gates.c",
        "old": "if (strcmp(loaded_build_id, plan->build_id) != 0) {",
        "new": "if (0) {",
        "tests": ["tests/test_gate_runtime.py::test_mismatched_driver_writes_nothing[build-id]"],
        "why": "a driver with another build-id is not written to",
    },
    # ---- gate identity at build time (shimgen/gates/plan.py) ----
    {
        "name": "gates-build-no-byte-check",
        "file": "shimgen/gates/plan.py",
        "old": "if image.contents[c.file_offset:c.file_offset + len(c.data)] != c.data:",
        "new": "if False:",
        "tests": ["tests/test_gate_runtime.py::"
                  "test_profile_with_one_byte_changed_is_refused_at_build"],
        # end to end, the check of every recorded instruction refuses such a profile too
        # (gates-build-init-sites-unchecked guards that one)
        "why": "a plan whose checked bytes differ from the driver file is not built",
    },
    {
        "name": "gates-build-first-window-only",
        "file": "shimgen/gates/plan.py",
        "old": "    for c in plan.checks:\n",
        "new": "    for c in plan.checks[:1]:\n",
        "tests": ["tests/test_gate_runtime.py::"
                  "test_profile_with_one_byte_changed_is_refused_at_build[-1]"],
        "why": "every recorded window of a profile is compared with the driver file",
    },
    {
        "name": "gates-build-no-build-id-check",
        "file": "shimgen/gates/plan.py",
        "old": "if plan.build_id != image.build_id:",
        "new": "if False:",
        "tests": ["tests/test_gate_runtime.py::test_plan_for_another_file_is_refused_at_build"],
        "why": "a profile of another driver build is refused, naming the build-id",
    },
    # ---- the dlopen redirect's edges (runtime/dlopen.c) ----
    {
        "name": "redirect-any-libcuda-prefix",
        "file": "runtime/dlopen.c",
        "old": 'strncmp(base, "libcuda.so", 10) == 0',
        "new": 'strncmp(base, "libcuda", 7) == 0',
        "tests": ["tests/test_redirect.py::test_other_bare_names_are_not_redirected"],
        "why": "libcudart.so.12, libcudadebugger.so.1 ... are never handed the shim",
    },
    {
        "name": "redirect-only-libcuda.so.1",
        "file": "runtime/dlopen.c",
        "old": 'strncmp(base, "libcuda.so", 10) == 0',
        "new": 'strcmp(base, "libcuda.so.1") == 0',
        "tests": ["tests/test_redirect.py::"
                  "test_libcuda_names_and_paths_to_the_driver_are_redirected"],
        "why": "dlopen(\"libcuda.so\") (perftest) and other libcuda.so* names get the shim",
    },
    {
        "name": "redirect-paths-by-name",
        "file": "runtime/dlopen.c",
        "old": "    if (!slash)\n",
        "new": "    if (!slash || strncmp(base, \"libcuda.so\", 10) == 0)\n",
        "tests": ["tests/test_redirect.py::"
                  "test_paths_that_are_not_the_driver_are_not_redirected"],
        "why": "a path is redirected only when it is the driver's file, not for its name",
    },
    {
        "name": "redirect-no-path-to-driver",
        "file": "runtime/dlopen.c",
        "old": "st.st_ino == shimgen_cfg.driver_stat.st_ino)",
        "new": "st.st_ino == shimgen_cfg.driver_stat.st_ino + 1)",
        "tests": ["tests/test_redirect.py::"
                  "test_libcuda_names_and_paths_to_the_driver_are_redirected"],
        "why": "any path to the real driver's file, whatever its name, gets the shim",
    },
    # ---- cuGetProcAddress answers the exact variant (runtime/hooks_proc_address.c) ----
    {
        "name": "procaddr-v2-drops-per-thread-stream-flag",
        "file": "runtime/hooks_proc_address.c",
        "old": "real(symbol, pfn, version, flags, status);",
        "new": "real(symbol, pfn, version, flags & ~2ull, status);",
        "tests": ["tests/test_shim.py::test_cu_get_proc_address_matches_real_driver"],
        "why": "cuGetProcAddress_v2 hands out the _ptsz/_ptds variant the driver would",
    },
    {
        "name": "procaddr-v1-older-version",
        "file": "runtime/hooks_proc_address.c",
        "old": "real(symbol, pfn, version, flags);",
        "new": "real(symbol, pfn, version < 3020 ? version : 3010, flags);",
        "tests": ["tests/test_shim.py::test_cu_get_proc_address_matches_real_driver"],
        "why": "cuGetProcAddress hands out cuMemAlloc_v2, not cuMemAlloc, at version 12000",
    },
    {
        "name": "procaddr-unmapped-not-counted",
        "file": "runtime/procaddr.c",
        "old": "__atomic_fetch_add(&shimgen_unmapped_proc_addresses, 1, __ATOMIC_RELAXED);",
        "new": "__atomic_fetch_add(&shimgen_unmapped_proc_addresses, 0, __ATOMIC_RELAXED);",
        "tests": ["tests/test_timing.py::test_shim_preserves_arguments_and_results[1]"],
        "why": "an answer that is no export is counted in unmapped_proc_addresses",
    },
    # ---- two shims: the promised message (runtime/driver.c) ----
    {
        "name": "two-shims-message-dropped",
        "file": "runtime/driver.c",
        "old": '        shimgen_say("shimgen: another shim (%s) is preloaded',
        "new": '        if (0) shimgen_say("shimgen: another shim (%s) is preloaded',
        "tests": ["tests/test_redirect.py::test_two_shims_say_exactly_the_promised_line"],
        "why": "with two shims, A says the one documented line naming B",
    },
    # ---- per-thread blocks, claimed and listed without a lock (runtime/stats.c) ----
    {
        "name": "stats-free-block-claim-not-atomic",
        "file": "runtime/stats.c",
        "old": "        if (__atomic_compare_exchange_n(&s->state, &expected, BLOCK_LIVE, 0, "
               "__ATOMIC_ACQUIRE,\n                                        __ATOMIC_RELAXED)) {\n",
        "new": "        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == expected &&\n"
               "            (__atomic_store_n(&s->state, BLOCK_LIVE, __ATOMIC_RELAXED), 1)) {\n",
        "tests": ["tests/test_races.py::test_threads_race_for_freed_blocks"],
        "why": "two threads never share a block: a freed block is claimed by one thread only",
    },
    {
        "name": "stats-free-block-claimed-unchecked",
        "file": "runtime/stats.c",
        "old": "        if (__atomic_compare_exchange_n(&s->state, &expected, BLOCK_LIVE, 0, "
               "__ATOMIC_ACQUIRE,\n                                        __ATOMIC_RELAXED)) {\n",
        "new": "        if ((void)expected, __atomic_store_n(&s->state, BLOCK_LIVE, "
               "__ATOMIC_RELAXED), 1) {\n",
        "tests": ["tests/test_races.py::test_threads_race_for_freed_blocks"],
        "why": "a block in use by a live thread is never handed to another",
    },
    # ---- the driver is loaded once, by one of the threads of the first calls (runtime/driver.c)
    {
        "name": "driver-load-claimed-without-cas",
        "file": "runtime/driver.c",
        "old": "        if (__atomic_compare_exchange_n(&load_state, &expect, LOAD_RUNNING, 0, "
               "__ATOMIC_ACQ_REL,\n                                        __ATOMIC_ACQUIRE)) {\n",
        "new": "        if ((void)expect, __atomic_store_n(&load_state, LOAD_RUNNING, "
               "__ATOMIC_RELEASE), 1) {\n",
        "tests": ["tests/test_races.py::test_sixty_four_first_calls_load_the_driver_once"],
        "why": "the driver is loaded once however many threads make the first call at once",
    },
    # ---- a forked child reports its own calls (runtime/stats.c) ----
    {
        "name": "fork-child-keeps-parent-time-totals",
        "file": "runtime/stats.c",
        "old": "        shimgen_time_total[i] = 0;\n",
        "new": "",
        "tests": ["tests/test_races.py::test_forked_child_times_only_its_own_calls"],
        "why": "a forked child's trace times its own calls, not its parent's",
    },
    {
        "name": "fork-child-keeps-parent-time-max",
        "file": "runtime/stats.c",
        "old": "        shimgen_time_max[i] = 0;\n",
        "new": "",
        "tests": ["tests/test_races.py::test_forked_child_times_only_its_own_calls"],
        "why": "a forked child's maximum call time is of its own calls",
    },
    # ---- builds into one output root at once (shimgen/build.py) ----
    {
        "name": "build-staging-not-locked",
        "file": "shimgen/build.py",
        "old": "                fcntl.flock(staging_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n",
        "new": "                pass\n",
        "tests": ["tests/test_bad_output.py::test_concurrent_builds_into_one_place"],
        "why": "a build's staging directory is never taken for a stale one while it runs",
    },
    # ---- error returns and latency histograms of the time paths (runtime/timing.S, stats.c) ----
    {
        "name": "errors-path-skipped",
        "file": "runtime/timing.S",
        "old": "        jnz     .L\\name\\()_error\n",
        "new": "",
        "tests": ["tests/test_errors.py::test_each_code_counted_and_a_function_without_cuResult"
                  "_never[time]"],
        "why": "every non-success return of a CUresult function is counted",
    },
    {
        "name": "errors-flag-table-ignored",
        "file": "runtime/timing.S",
        "old": "        cmpb    $0, (%rcx,%rdi)\n        je      2b\n",
        "new": "",
        "tests": ["tests/test_errors.py::test_each_code_counted_and_a_function_without_cuResult"
                  "_never[timeline]"],
        "why": "a function that returns no CUresult never has its eax counted as an error",
    },
    {
        "name": "errors-overflow-not-counted",
        "file": "runtime/timing.S",
        "old": "        incq    TS_ERR_OVERFLOW(%r10)",
        "new": "        nop",
        "tests": ["tests/test_errors.py::test_more_codes_than_slots_go_to_the_overflow"],
        "why": "error returns that find every slot taken are counted in error_overflow",
    },
    {
        "name": "hist-wrong-bucket",
        "file": "runtime/timing.S",
        "old": "        bsr     %rdx, %rdx                          /* the bucket */\n",
        "new": "        bsr     %rdx, %rdx\n        inc     %rdx\n",
        "tests": ["tests/test_errors.py::test_histogram_bucket_of_a_call_of_known_length[time]"],
        "why": "a call of 2^b to 2^(b+1) ticks is counted in bucket b",
    },
    {
        "name": "hist-not-cleared-on-reuse",
        "file": "runtime/stats.c",
        "old": "            memset(s->hist[i], 0, sizeof s->hist[i]);\n",
        "new": "",
        "tests": ["tests/test_errors.py::test_blocks_reused_by_later_threads_fold_and_clear[time]"],
        "why": "a block reused by a later thread starts with empty histograms",
    },
    {
        "name": "errors-not-cleared-on-reuse",
        "file": "runtime/stats.c",
        "old": "    memset(s->err, 0, sizeof s->err);\n",
        "new": "",
        "tests": ["tests/test_errors.py::test_blocks_reused_by_later_threads_fold_and_clear"
                  "[timeline]"],
        "why": "a block reused by a later thread starts with no error slots",
    },
    {
        "name": "fold-forgets-errors",
        "file": "runtime/stats.c",
        "old": "            fold_error(s->err[e].key, s->err[e].count);",
        "new": "            (void)0;",
        "tests": ["tests/test_errors.py::test_each_code_counted_and_a_function_without_cuResult"
                  "_never[time]"],
        "why": "a thread's error returns reach the trace written at exit",
    },
    {
        "name": "fork-keeps-parent-hist",
        "file": "runtime/stats.c",
        "old": "            memset(shimgen_hist[i], 0, sizeof shimgen_hist[i]);\n",
        "new": "",
        "tests": ["tests/test_races.py::test_forked_child_times_only_its_own_calls"],
        "why": "a forked child's histograms hold its own calls only",
    },
    # ---- the benchmark's reported numbers (benchmarks/) ----
    {
        "name": "bench-time-variant-silently-dropped",
        "file": "benchmarks/suite.py",
        "old": 'if "not a known mode" in err:',
        "new": 'if "not a known mode" not in err:',
        "tests": ["tests/test_benchmarks.py::test_quick_call_timings_are_sane"],
        "why": "the time variant is measured, not left out as 'unavailable'",
    },
    {
        "name": "bench-bar-reports-best-not-worst",
        "file": "benchmarks/report.py",
        "old": "if worst is None or added > worst[0]:",
        "new": "if worst is None or added < worst[0]:",
        "tests": ["tests/test_benchmarks.py::test_quick_bars"],
        "why": "a bar is judged on the worst case measured",
    },
    # ---- a documented option is not skipped away (shimgen/cli.py) ----
    {
        "name": "cli-gates-option-renamed",
        "file": "shimgen/cli.py",
        "old": 'b.add_argument("--gates", metavar="auto|PROFILE",',
        "new": 'b.add_argument("--gate-profile", dest="gates", metavar="auto|PROFILE",',
        "tests": ["tests/test_bad_cli.py::test_malformed_or_foreign_gate_profile"],
        "why": "`shimgen build --gates` is documented; its tests fail, not skip, without it",
    },
]
