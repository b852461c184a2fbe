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
        "old": ("            refs += [site.insn] + ([site.or_insn] if site.or_insn is not None "
                "else [])\n"),
        "new": "            pass\n",
        "tests": ["tests/test_gate_runtime.py::test_real_profile_with_one_byte_changed_is_refused"
                  "_by_build[init-site]"],
        "why": "a profile is refused unless every instruction it records is in the driver",
    },
    # ---- the init site: chosen, proven, written only to the exact build, or to a copy ----
    {
        "name": "init-write-without-identity-check",
        "file": "runtime/driver.c",
        "old": "if (ok && shimgen_cfg.gate_method_init) {",
        "new": "if (shimgen_cfg.gate_method_init) {",
        "tests": ["tests/test_gate_init_fake.py::"
                  "test_init_method_writes_nothing_unless_every_byte_matches[other-window]"],
        "why": "the driver's code is changed only when build-id and every recorded byte match",
    },
    {
        "name": "init-set-a-fixed-bit",
        "file": "shimgen/gates/initsite.py",
        "old": "changes = [_change(code, o, (_imm(o) | mask) & 0xFF) for o in ors]",
        "new": "changes = [_change(code, o, (_imm(o) | 0x20) & 0xFF) for o in ors]",
        "tests": ["tests/test_initsite.py::test_the_gates_own_bit_is_the_one_added"],
        "why": "the change adds the gate's own bit (0x40 | mask), not a fixed one",
    },
    {
        "name": "init-mask-keeps-the-bit",
        "file": "shimgen/gates/initsite.py",
        "old": "changes = [_change(code, i, _imm(i) & ~mask & 0xFF) for i in fixable]",
        "new": "changes = [_change(code, i, _imm(i) & ~(mask << 1) & 0xFF) for i in fixable]",
        "tests": ["tests/test_initsite.py::test_mask_takes_the_bit_out_of_every_setter",
                  "tests/test_initsite.py::test_debian_driver_init_sites_chosen_and_proven"],
        "why": "the mask change takes the gate's bit out of every setter's immediate",
    },
    {
        "name": "init-proof-accepts-other-bits",
        "file": "shimgen/gates/initsite.py",
        "old": "ok = (b0 & patch.mask) == (before & patch.mask) and b1 == b0 | patch.mask",
        "new": "ok = (b0 & patch.mask) == (before & patch.mask) and bool(b1 & patch.mask)",
        "tests": ["tests/test_initsite.py::"
                  "test_the_proof_catches_a_change_that_sets_another_bit_too"],
        "why": "the proof fails a change that sets any bit besides the gate's",
    },
    {
        "name": "patch-writes-the-original",
        "file": "shimgen/gates/patch.py",
        "old": "        _put(dfd, name, bytes(copy))\n",
        "new": ("        image.real_path.write_bytes(bytes(copy))\n"
                "        _put(dfd, name, bytes(copy))\n"),
        "tests": ["tests/test_initsite.py::"
                  "test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads[set]"],
        "why": "shimgen patch only reads the driver it copies",
    },
    {
        "name": "patch-manifest-lists-a-byte-not-changed",
        "file": "shimgen/gates/patch.py",
        "old": "    for c in changes:\n        copy[c.byte.file_offset] = c.byte.new\n",
        "new": "    for c in changes[:1]:\n        copy[c.byte.file_offset] = c.byte.new\n",
        "tests": ["tests/test_initsite.py::"
                  "test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads[set]"],
        "why": "the copy differs from the original in exactly the manifest's bytes",
    },
    {
        "name": "patch-manifest-sha-of-the-original",
        "file": "shimgen/gates/patch.py",
        "old": "\"sha256\": _sha256(bytes(copy))",
        "new": "\"sha256\": _sha256(image.contents)",
        "tests": ["tests/test_initsite.py::"
                  "test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads[set]"],
        "why": "the manifest's sha256 of the copy is the copy's",
    },
    {
        "name": "patch-already-patched-not-recognised",
        "file": "shimgen/gates/patch.py",
        "old": "if wanted and all(h == c.byte.new for h, c in zip(have, wanted, strict=True)):",
        "new": "if False:",
        "tests": ["tests/test_initsite.py::test_patch_refuses_foreign_and_already_patched_files"],
        "why": "a copy made earlier is named as already patched, not taken for a foreign file",
    },
    {
        "name": "init-plan-byte-not-among-the-checked",
        "file": "shimgen/gates/plan.py",
        "old": "return c.data[b.vaddr - c.vaddr] == b.old",
        "new": "return True",
        "tests": ["tests/test_gate_init_fake.py::test_plan_with_an_unchecked_init_byte_is_refused"],
        "why": "every byte the init method writes is compared, as shipped, before any write",
    },
    {
        "name": "init-profile-file-proof-trusted",
        "file": "shimgen/gates/plan.py",
        "old": "        if problems:\n",
        "new": "        if False:\n",
        "tests": ["tests/test_initsite.py::"
                  "test_a_profile_files_init_change_is_proven_again_at_build"],
        "why": "an init-site change from a profile file is proven again before it is baked in",
    },
    {
        "name": "init-merge-of-more-than-the-bit-dropped",
        "file": "shimgen/gates/initsite.py",
        "old": "if m is None or w.keep != (~mask & 0xFF) or len(m.bytes) != 2",
        "new": "if m is None or len(m.bytes) != 2",
        "tests": ["tests/test_initsite.py::"
                  "test_mask_drops_the_merge_of_a_computed_bit_only_when_exact"],
        "why": "a merge is dropped only when the register it brings in can hold the gate's "
               "bit alone",
    },
    {
        "name": "init-merge-flags-read-after-ignored",
        "file": "shimgen/gates/initsite.py",
        "old": "        if {ins.reg_name(r) for r in read} & FLAG_REGS:\n            return None\n",
        "new": "",
        "tests": ["tests/test_initsite.py::"
                  "test_mask_drops_the_merge_of_a_computed_bit_only_when_exact"],
        "why": "a merge whose flags are read afterwards is not changed",
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
        "name": "trace-file-readable-by-others",
        "file": "runtime/output.c",
        "old": "O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);",
        "new": "O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);",
        "tests": ["tests/test_faults_files.py::test_trace_file_is_created_0600_by_the_user"],
        "why": "a trace file is the user's alone",
    },
    {
        "name": "percentile-not-the-reports",
        "file": "runtime/trace.c",
        "old": "            return lo + (hi - lo) * (want - below) / (double)h[b];\n",
        "new": "            return (lo ? lo : 1.0) * 1.4142135623730951;\n",
        "tests": ["tests/test_errors.py::test_histogram_bucket_of_a_call_of_known_length[time]"],
        "why": "the shim's p50 and p99 are computed as shimgen report computes them",
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
    # ---- shimgen report (shimgen/report.py, report_format.py, report_compare.py) ----
    {
        "name": "report-merge-drops-a-process",
        "file": "shimgen/report.py",
        "old": "    for p in processes:\n        counted = ",
        "new": "    for p in processes[1:]:\n        counted = ",
        "tests": ["tests/test_report.py::test_merge_counts_every_process"],
        "why": "a report sums every process of a run",
    },
    {
        "name": "report-percentile-off-by-a-bucket",
        "file": "shimgen/report.py",
        "old": "    return lo, float(1 << (bucket + 1)) * ns_per_tick",
        "new": "    return lo, float(1 << (bucket + 2)) * ns_per_tick",
        "tests": ["tests/test_report.py::test_percentile_of_one_process_interpolates_within_the"
                  "_bucket",
                  "tests/test_report.py::test_percentiles_of_processes_with_different_ticks_merge"
                  "_by_ns_edges"],
        "why": "p50 and p99 interpolate within the right log2 bucket's edges",
    },
    {
        "name": "report-percentile-top-bucket-not-capped",
        "file": "shimgen/report.py",
        "old": "        hi = max(lo, min(hi, max_ns))",
        "new": "        hi = max(lo, hi)",
        "tests": ["tests/test_report.py::test_percentile_of_one_process_interpolates_within_the"
                  "_bucket"],
        "why": "the top bucket ends at the largest call, so no percentile exceeds max",
    },
    {
        "name": "report-merged-percentile-drops-top-buckets",
        "file": "shimgen/report.py",
        "old": "            summed[top] -= hist[top]  # in `out` already",
        "new": "            summed[top] -= 0  # in `out` already",
        "tests": ["tests/test_report.py::test_percentiles_of_processes_with_different_ticks_merge"
                  "_by_ns_edges"],
        "why": "each call of a merged histogram counts once",
    },
    {
        "name": "report-merged-percentile-density-never-ends",
        "file": "shimgen/report.py",
        "old": "            density[hi] = density.get(hi, 0.0) - c / (hi - lo)",
        "new": "            density[hi] = density.get(hi, 0.0) - 0.0",
        "tests": ["tests/test_report.py::test_percentiles_of_processes_with_different_ticks_merge"
                  "_by_ns_edges"],
        "why": "overlapping ranges of merged processes add up only where they overlap",
    },
    {
        "name": "report-compare-calls-before-errors",
        "file": "shimgen/report_compare.py",
        "old": "    return (-_delta(row[\"errors_a\"], row[\"errors_b\"]), "
               "-_delta(row[\"calls_a\"], row[\"calls_b\"]),",
        "new": "    return (-_delta(row[\"calls_a\"], row[\"calls_b\"]), "
               "-_delta(row[\"errors_a\"], row[\"errors_b\"]),",
        "tests": ["tests/test_report.py::test_compare_orders_errors_then_calls_then_time"],
        "why": "two runs compared: what changed most in errors first, then calls, then time",
    },
    {
        "name": "report-errors-section-first-code-only",
        "file": "shimgen/report_format.py",
        "old": "for name, m in functions.items() for code, n in m.errors.items() if n]",
        "new": "for name, m in functions.items() for code, n in list(m.errors.items())[:1] if n]",
        "tests": ["tests/test_report.py::test_errors_section_names_every_code"],
        "why": "the errors section lists every (function, code) with non-success returns",
    },
    {
        "name": "report-by-rank-groups-by-pid",
        "file": "shimgen/report.py",
        "old": 'key = str(p.pid) if by == "pid" else',
        "new": 'key = str(p.pid) if by != "pid" else',
        "tests": ["tests/test_report.py::test_by_rank_and_by_pid_split_the_processes"],
        "why": "--by rank and --by pid split the processes by what they name",
    },
    {
        "name": "report-json-trace-hist-ignored",
        "file": "shimgen/tracejson.py",
        "old": "        if hist is not None:\n            fs.hist = hist + ",
        "new": "        if False:\n            fs.hist = hist + ",
        "tests": ["tests/test_report.py::test_merge_counts_every_process"],
        "why": "the extended JSON trace's histograms are read (p50 and p99 come from them)",
    },
    {
        "name": "report-directory-skips-traces-dir",
        "file": "shimgen/report.py",
        "old": "    for d in (directory, directory / TRACES):",
        "new": "    for d in (directory,):",
        "tests": ["tests/test_report.py::test_directory_reads_traces_and_skips_other_json_by"
                  "_content"],
        "why": "a run directory's traces are under traces/",
    },
    {
        "name": "report-truncated-trace-in-directory-skipped",
        "file": "shimgen/report.py",
        "old": "    except NotATrace:\n        if skip_other_json:",
        "new": "    except ShimgenError:\n        if skip_other_json:",
        "tests": ["tests/test_report.py::test_refused_with_one_line[truncated-in-dir]"],
        "why": "a damaged trace in a run is refused, not silently left out of the totals",
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
    # ---- the binary trace file (runtime/tracefile.c, shimgen/tracefile.py) ----
    {
        "name": "tracefile-child-writes-parents-file",
        "file": "runtime/stats.c",
        "old": "    shimgen_tracefile_after_fork();\n",
        "new": "",
        "tests": ["tests/test_tracefile.py::"
                  "test_fork_and_exec_trees_give_each_process_its_own_file[fork]"],
        "why": "a forked child counts into its own file, never its parent's",
    },
    {
        "name": "tracefile-block-private",
        "file": "runtime/tracefile.c",
        "old": "PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);",
        "new": "PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, off);",
        "tests": ["tests/test_tracefile.py::"
                  "test_sigkill_leaves_exact_counts_and_reused_blocks_count_once"],
        "why": "the stubs count into the file's pages: a process killed by SIGKILL loses no count",
    },
    {
        "name": "tracefile-truncated-when-a-block-is-added",
        "file": "runtime/tracefile.c",
        "old": "    if (fallocate(fd, 0, off, len) == 0)\n",
        "new": "    if (ftruncate(fd, off + len) == 0)\n",
        "tests": ["tests/test_tracefile.py::"
                  "test_sixty_four_first_calls_at_once_make_one_file"],
        "why": "the file only grows: two threads adding blocks at once never cut each other's off",
    },
    {
        "name": "tracefile-reused-block-counted-twice",
        "file": "runtime/stats.c",
        "old": "        if (!shimgen_tracefile_ready()) {\n            fold_block(s);\n",
        "new": "        fold_block(s);\n        if (!shimgen_tracefile_ready()) {\n",
        "tests": ["tests/test_tracefile.py::"
                  "test_sigkill_leaves_exact_counts_and_reused_blocks_count_once"],
        "why": "a retired thread's counts stay in its block, found in the file exactly once",
    },
    {
        "name": "tracefile-retired-counts-kept-in-memory",
        "file": "runtime/stats.c",
        "old": "        if (!shimgen_tracefile_ready()) {\n            fold_block(s);\n",
        "new": "        if (1) {\n            fold_block(s);\n",
        "tests": ["tests/test_tracefile.py::"
                  "test_sigkill_leaves_exact_counts_and_reused_blocks_count_once"],
        "why": "a retired thread's counts are in the file, not only in memory (lost on SIGKILL)",
    },
    {
        "name": "tracefile-reader-magic-unchecked",
        "file": "shimgen/tracefile.py",
        "old": "    if m[:len(MAGIC)] != MAGIC:\n",
        "new": "    if False:\n",
        "tests": ["tests/test_tracefile_reader.py::"
                  "test_corrupt_header_is_refused[magic-SHIMTRC\\x00-words0]"],
        "why": "a file without the magic is refused",
    },
    {
        "name": "tracefile-reader-version-unchecked",
        "file": "shimgen/tracefile.py",
        "old": "    if h[\"version\"] != VERSION:\n",
        "new": "    if h[\"version\"] > VERSION + 1:\n",
        "tests": ["tests/test_tracefile_reader.py::"
                  "test_corrupt_header_is_refused[version-2-words1]"],
        "why": "a file of another format version is refused, not misread",
    },
    {
        "name": "tracefile-reader-truncation-unchecked",
        "file": "shimgen/tracefile.py",
        "old": "    if (size - boff) % stride:\n",
        "new": "    if False:\n",
        "tests": ["tests/test_tracefile_reader.py::test_truncated_file_is_refused[mid-block]",
                  "tests/test_tracefile_reader.py::test_truncated_file_is_refused[last-byte]"],
        "why": "a file cut short in its blocks is refused",
    },
    {
        "name": "tracefile-reader-block-count-unchecked",
        "file": "shimgen/tracefile.py",
        "old": "    if not h[\"blocks_mapped\"] <= n <= h[\"blocks_reserved\"]:\n",
        "new": "    if False:\n",
        "tests": ["tests/test_tracefile_reader.py::"
                  "test_truncated_file_is_refused[whole-block]"],
        "why": "a file that lost whole blocks is refused (its header says how many it mapped)",
    },
    {
        "name": "run-fast-parser-differs-from-argparse",
        "file": "shimgen/cli.py",
        "old": '"gate_profile", "-o": "out", "--out": "out"}',
        "new": '"gate_profile", "-o": "driver", "--out": "out"}',
        "tests": ["tests/test_cli_start.py::test_the_fast_run_parser_gives_what_argparse_gives"],
        "why": "`run`'s fast parser gives what argparse would, or leaves the line to argparse",
    },
    {
        "name": "run-fast-parser-takes-a-dash-value",
        "file": "shimgen/cli.py",
        "old": "            if i + 1 >= len(argv) or argv[i + 1].startswith(\"-\"):\n",
        "new": "            if i + 1 >= len(argv):\n",
        "tests": ["tests/test_cli_start.py::test_the_fast_run_parser_gives_what_argparse_gives"],
        "why": "a separate value that starts with '-' is left to argparse, as it reads it",
    },
    # ---- shimgen run: signals, exit status, the command's environment (shimgen/run.py) ----
    {
        "name": "run-terminal-signal-forwarded-again",
        "file": "shimgen/run.py",
        "old": "                if info.si_code in SENT_BY_A_PROCESS:\n",
        "new": "                if True:\n",
        "tests": ["tests/test_run.py::test_a_terminals_ctrl_c_reaches_the_command_once"],
        "why": "a terminal's Ctrl-C reaches the command once, not again from `run`",
    },
    {
        "name": "run-signal-not-forwarded",
        "file": "shimgen/run.py",
        "old": "                if info.si_code in SENT_BY_A_PROCESS:\n",
        "new": "                if info.si_code in SENT_BY_A_PROCESS and False:\n",
        "tests": ["tests/test_run.py::test_signals_sent_to_run_reach_the_command_exactly_once"],
        "why": "SIGINT, SIGTERM and SIGHUP sent to `run` reach the command",
    },
    {
        "name": "run-command-starts-with-signals-blocked",
        "file": "shimgen/run.py",
        "old": "pid = os.posix_spawn(path, argv, env, setsigmask=old,",
        "new": "pid = os.posix_spawn(path, argv, env,",
        "tests": ["tests/test_run.py::test_signals_sent_to_run_reach_the_command_exactly_once"],
        "why": "the command starts with the signal mask `run` was given, not the one it waits in",
    },
    {
        "name": "run-signalled-status-not-128-plus",
        "file": "shimgen/run.py",
        "old": "        return 128 + os.WTERMSIG(wait_status)\n",
        "new": "        return os.WTERMSIG(wait_status)\n",
        "tests": ["tests/test_run.py::test_exit_status_is_the_commands"],
        "why": "a command killed by signal N makes `run` exit 128+N, as a shell",
    },
    {
        "name": "run-preload-replaced-not-prepended",
        "file": "shimgen/run.py",
        "old": "env[ENV_PRELOAD] = f\"{shim}:{before}\" if before.strip() else str(shim)",
        "new": "env[ENV_PRELOAD] = str(shim)",
        "tests": ["tests/test_run.py::test_the_command_gets_the_shim_first_and_the_run_directory"],
        "why": "what LD_PRELOAD held is kept, after the shim",
    },
    {
        "name": "run-directory-with-files-taken",
        "file": "shimgen/run.py",
        "old": "        if os.listdir(fd):\n",
        "new": "        if False:\n",
        "tests": ["tests/test_run.py::test_an_existing_directory_with_files_is_refused"],
        "why": "`run -o DIR` never writes into a directory that holds files",
    },
    # ---- the shim cache (shimgen/cache.py) ----
    {
        "name": "cache-key-without-gates",
        "file": "shimgen/cache.py",
        "old": "return f\"{self.build_id}-{self.version}-{self.gates or 'plain'}\"",
        "new": "return f\"{self.build_id}-{self.version}\"",
        "tests": ["tests/test_run_cache.py::test_gated_and_plain_shims_live_side_by_side",
                  "tests/test_run_cache.py::test_keys_differ_in_each_part"],
        "why": "a gated shim and a plain one have keys of their own and never replace each other",
    },
    {
        "name": "cache-short-library-used",
        "file": "shimgen/cache.py",
        "old": "        if os.stat(lib).st_size != manifest.get(\"library_size\"):\n",
        "new": "        if False:\n",
        "tests": ["tests/test_run_cache.py::test_a_damaged_entry_is_rebuilt_never_used"
                  "[library-cut-short]"],
        "why": "a cached library cut short is rebuilt, never preloaded",
    },
    {
        "name": "cache-built-again-after-the-wait",
        "file": "shimgen/cache.py",
        "old": "if not why and os.path.lexists(directory):  # another run built it meanwhile",
        "new": "if False:",
        "tests": ["tests/test_run_cache.py::test_first_runs_at_once_build_once"],
        "why": "first runs at once build once: the others use the entry they waited for",
    },
    {
        "name": "cache-default-driver-kept-after-ldconfig",
        "file": "shimgen/cache.py",
        "old": "if stamp is not None and got[\"ld_so_cache\"] == stamp and os.path.exists(",
        "new": "if stamp is not None and os.path.exists(",
        "tests": ["tests/test_run_cache.py::test_the_default_driver_is_remembered_until_the_loader"
                  "_cache_changes"],
        "why": "the driver `run` picks by default is asked again once the loader's cache changed",
    },
    # ---- gate profiles: proof status, and the command line of gates and build ----
    {
        "name": "gates-unproven-profile-baked",
        "file": "shimgen/gates/plan.py",
        "old": "    if plan.proof != PROOF_PASSED and not allow_unproven:\n",
        "new": "    if plan.proof == PROOF_FAILED and not allow_unproven:\n",
        "tests": ["tests/test_gate_profiles_cli.py::test_unproven_or_failed_profiles_are_refused"],
        "why": "a profile whose proof was not run is never baked without --allow-unproven-gates",
    },
    {
        "name": "gates-failed-proof-read-as-passed",
        "file": "shimgen/gates/profile.py",
        "old": "(PROOF_PASSED if self.proof.get(\"ok\") is True",
        "new": "(PROOF_PASSED if self.proof.get(\"ok\") is not None",
        "tests": ["tests/test_gate_profiles_cli.py::test_unproven_or_failed_profiles_are_refused"],
        "why": "a profile whose proof failed is never read as proven",
    },
    {
        "name": "gates-no-proof-written-as-proven",
        "file": "shimgen/gates/report.py",
        "old": "profile.proof = {\"status\": PROOF_NOT_RUN, \"ok\": False,",
        "new": "profile.proof = {\"status\": \"passed\", \"ok\": True,",
        "tests": ["tests/test_gate_profiles_cli.py::test_profiles_record_their_proof_status",
                  "tests/test_gate_profiles_cli.py::test_unproven_or_failed_profiles_are_refused"],
        "why": "a profile written with --no-proof says that it is unproven",
    },
    {
        "name": "cli-empty-gates-builds-without",
        "file": "shimgen/cli.py",
        "old": "    if not value.strip():\n        raise _type_error",
        "new": "    if False:\n        raise _type_error",
        "tests": ["tests/test_gate_profiles_cli.py::test_empty_gates_is_a_usage_error"],
        "why": "an empty --gates is a usage error, not a build without gates",
    },
    {
        "name": "gates-json-checked-after-the-analysis",
        "file": "shimgen/cli.py",
        "old": "        check_target(json_out, \"--json\", report.is_profile)\n",
        "new": "",
        "tests": ["tests/test_gate_profiles_cli.py::test_json_into_a_missing_or_wrong_directory"
                  "_fails_first",
                  "tests/test_gate_profiles_cli.py::test_json_never_clobbers_a_file_that_is_not"
                  "_a_profile"],
        "why": "shimgen gates refuses an output path before the analysis, and never clobbers "
               "a file that is not a profile",
    },
    {
        "name": "probe-child-line-wrapped-again",
        "file": "shimgen/probe/child.py",
        "old": "        if proc.returncode == 1 and said != last:",
        "new": "        if False:",
        "tests": ["tests/test_probe_child.py::test_probe_on_a_machine_without_a_driver"],
        "why": "a probe child's one line is said once, with no doubled prefix",
    },
    {
        "name": "probe-no-driver-internal-error",
        "file": "shimgen/probe/gated.py",
        "old": "    except Exception:  # noqa: BLE001 - cuda-python could not load libcuda at all\n"
               "        raise ShimgenError(NO_DRIVER) from None\n",
        "new": "    except ImportError:\n        raise ShimgenError(NO_DRIVER) from None\n",
        "tests": ["tests/test_probe_child.py::test_probe_without_a_driver_is_one_clear_line"],
        "why": "no driver is one line that says so, not an internal error naming a class",
    },
    # ---- the plain trace name: the first process of the job to write (runtime/claim.c) ----
    {
        "name": "claim-plain-name-never-taken",
        "file": "runtime/claim.c",
        "old": "    return S_ISREG(st.st_mode) && st.st_mtim.tv_sec == stored->tv_sec &&",
        "new": "    return 0 && st.st_mtim.tv_sec == stored->tv_sec &&",
        "tests": ["tests/test_faults_process.py::test_wrapper_process_leaves_the_plain_name_to_"
                  "the_program"],
        "why": "one process of a job takes the plain name; the others write <name>.<pid>",
    },
    {
        "name": "claim-without-the-directory-lock",
        "file": "runtime/output.c",
        "old": "    int lock = shimgen_claim_lock(o->dirfd), e;",
        "new": "    int lock = -1, e;",
        "tests": ["tests/test_faults_process.py::test_writers_at_the_same_moment_take_the_plain"
                  "_name_once"],
        "why": "two processes of a job that write at the same moment never both take the "
               "plain name (one trace would be lost)",
    },
    {
        "name": "claim-forked-copy-takes-the-plain-name",
        "file": "runtime/trace.c",
        "old": "    return getpid() != shimgen_cfg.load_pid;\n",
        "new": "    return 0;\n",
        "tests": ["tests/test_shim.py::test_calls_in_forked_children"],
        "why": "a program's forked copies write <name>.<pid>; the program keeps the plain name",
    },
    {
        "name": "claim-job-not-inherited",
        "file": "runtime/config.c",
        "old": "    if (v && *v >= '0' && *v <= '9') {",
        "new": "    if (0) {",
        "tests": ["tests/test_faults_process.py::test_wrapper_process_leaves_the_plain_name_to_"
                  "the_program"],
        "why": "the processes a job's first process starts are of the same job",
    },
    {
        "name": "trace-written-not-said",
        "file": "runtime/trace.c",
        "old": "    shimgen_say(\"shimgen: trace written to %s\\n\", path);\n",
        "new": "",
        "tests": ["tests/test_faults_process.py::test_wrapper_process_leaves_the_plain_name_to_"
                  "the_program"],
        "why": "every JSON trace written says where",
    },
    {
        "name": "pyproject-license-table",
        "file": "pyproject.toml",
        "old": 'license = "MIT"',
        "new": 'license = { text = "MIT" }',
        "tests": ["tests/test_packaging.py::test_wheel_builds_without_warnings_and_carries_"
                  "templates_and_runtime"],
        "why": "pip install prints no setuptools deprecation warning",
    },
]
