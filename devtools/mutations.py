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
    # ---- the mutation check's own selection (devtools/mutselect.py: CI's share) ----
    {
        "name": "mutselect-caught-commit-ignored",
        "file": "devtools/mutselect.py",
        "old": "    bases = {m.name: (caught or {}).get(m.name, ref) for m in mutations}\n",
        "new": "    bases = {m.name: ref for m in mutations}\n",
        "tests": ["tests/devtools/test_mutants.py::test_an_entry_caught_at_a_later_commit_counts_from_it"],
        "why": "an entry caught at a later commit counts from it, not from the whole list's",
    },
    {
        "name": "mutants-record-of-a-changed-tree",
        "file": "devtools/mutants.py",
        "old": "    if status.returncode or head.returncode or status.stdout.strip():\n",
        "new": "    if status.returncode or head.returncode:\n",
        "tests": ["tests/devtools/test_mutants.py::test_an_entry_caught_at_a_later_commit_counts_from_it"],
        "why": "a run records its caught entries at HEAD only when the tree it tested is HEAD",
    },
    {
        "name": "mutselect-changed-file-not-picked",
        "file": "devtools/mutselect.py",
        "old": "                or m.file in files[base] or any(",
        "new": "                or any(",
        "tests": ["tests/devtools/test_mutants.py::"
                  "test_changed_since_picks_the_entries_a_change_can_have_broken"],
        "why": "an entry whose code changed since the last whole check is checked in CI",
    },
    {
        "name": "mutselect-share-overlaps",
        "file": "devtools/mutselect.py",
        "old": "    return zlib.crc32(name.encode()) % n == k",
        "new": "    return zlib.crc32(name.encode()) % n <= k",
        "tests": ["tests/devtools/test_mutants.py::"
                  "test_shares_partition_the_list_and_auto_rotates_with_the_commits"],
        "why": "the shares partition the list: every entry is checked once in N landings",
    },
    # ---- gate identity at build time: every instruction a profile records ----
    {
        "name": "gates-build-init-sites-unchecked",
        "file": "shimgen/gates/plan.py",
        "old": ("            refs += [site.insn] + ([site.or_insn] if site.or_insn is not None "
                "else [])\n"),
        "new": "            pass\n",
        "tests": ["tests/gates/test_gate_runtime.py::test_real_profile_with_one_byte_changed_is_refused"
                  "_by_build[init-site]"],
        "why": "a profile is refused unless every instruction it records is in the driver",
    },
    # ---- the init site: chosen, proven, written only to the exact build, or to a copy ----
    {
        "name": "init-write-without-identity-check",
        "file": "runtime/gates/gates.c",
        "old": "    if (!shimgen_gates_verify(driver_base, loaded_build_id, why, sizeof why)) {\n",
        "new": "    if (!shimgen_gates_verify(driver_base, loaded_build_id, why, sizeof why)\n        && shimgen_cfg.gate_method == SHIMGEN_GATE_METHOD_STRUCT) {\n",
        "tests": ["tests/gates/test_gate_init_fake.py::"
                  "test_init_method_writes_nothing_unless_every_byte_matches[other-window]"],
        "why": "the driver's code is changed only when build-id and every recorded byte match",
    },
    # ---- the set site traced through the blocks of its function (gates/stored.py) ----
    {
        "name": "setsite-paths-that-disagree-joined",
        "file": "shimgen/gates/stored.py",
        "old": "{f: v for f, v in old.items() if after.get(f) == v}",
        "new": "{**old, **after}",
        "tests": ["tests/gates/test_setsite.py::test_shapes_that_are_not_set_sites[paths-disagree]"],
        "why": "a store is a set site only when every way into it brings the same value",
    },
    {
        "name": "setsite-call-keeps-caller-saved",
        "file": "shimgen/gates/stored.py",
        "old": "        wrote |= CALLER_SAVED",
        "new": "        pass",
        "tests": ["tests/gates/test_setsite.py::test_shapes_that_are_not_set_sites[call-between]"],
        "why": "a call may change every caller-saved register: what it held before is not known after",
    },
    {
        "name": "setsite-struct-pointer-change-ignored",
        "file": "shimgen/gates/stored.py",
        "old": "if f not in wrote and v.base not in wrote}",
        "new": "if f not in wrote}",
        "tests": ["tests/gates/test_setsite.py::test_shapes_that_are_not_set_sites[other-struct]"],
        "why": "a byte loaded through a register is the same field only while that register is unchanged",
    },
    {
        "name": "init-sites-decoded-from-a-guess",
        "file": "shimgen/gates/discover.py",
        "old": "            if ins is not None:  # its function's own decode says where the instruction is",
        "new": "            if False:",
        "tests": ["tests/gates/test_setsite.py::test_a_prefixed_writer_is_read_where_its_function_puts_it"],
        "why": "a writer with a REX prefix is read at its real address and register (r13, not rbp)",
    },
    {
        "name": "setsite-proof-runs-unsteered",
        "file": "shimgen/gates/emulator.py",
        "old": "            uc.reg_write(UC_X86_REG_RIP, BASE + data)",
        "new": "            pass",
        "tests": ["tests/gates/test_setsite.py::test_compiler_variants_are_set_sites[taken-branch]"],
        "why": "the proof runs the path the analysis traced, each branch as decoded",
    },
    {
        "name": "init-set-a-fixed-bit",
        "file": "shimgen/gates/initsite.py",
        "old": "changes = [_change(code, o, (_imm(o) | mask) & 0xFF) for o in ors]",
        "new": "changes = [_change(code, o, (_imm(o) | 0x20) & 0xFF) for o in ors]",
        "tests": ["tests/gates/test_initsite.py::test_the_gates_own_bit_is_the_one_added"],
        "why": "the change adds the gate's own bit (0x40 | mask), not a fixed one",
    },
    {
        "name": "init-mask-keeps-the-bit",
        "file": "shimgen/gates/initsite.py",
        "old": "changes = [_change(code, i, _imm(i) & ~mask & 0xFF) for i in fixable]",
        "new": "changes = [_change(code, i, _imm(i) & ~(mask << 1) & 0xFF) for i in fixable]",
        "tests": ["tests/gates/test_initsite.py::test_mask_takes_the_bit_out_of_every_setter",
                  "tests/gates/test_initsite.py::test_debian_driver_init_sites_chosen_and_proven"],
        "why": "the mask change takes the gate's bit out of every setter's immediate",
    },
    {
        "name": "init-proof-accepts-other-bits",
        "file": "shimgen/gates/initsite.py",
        "old": "ok = (b0 & patch.mask) == (before & patch.mask) and b1 == b0 | patch.mask",
        "new": "ok = (b0 & patch.mask) == (before & patch.mask) and bool(b1 & patch.mask)",
        "tests": ["tests/gates/test_initsite.py::"
                  "test_the_proof_catches_a_change_that_sets_another_bit_too"],
        "why": "the proof fails a change that sets any bit besides the gate's",
    },
    {
        "name": "patch-writes-the-original",
        "file": "shimgen/gates/patch.py",
        "old": "        _put(dfd, name, bytes(copy))\n",
        "new": ("        image.real_path.write_bytes(bytes(copy))\n"
                "        _put(dfd, name, bytes(copy))\n"),
        "tests": ["tests/gates/test_initsite.py::"
                  "test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads[set]"],
        "why": "shimgen patch only reads the driver it copies",
    },
    {
        "name": "patch-manifest-lists-a-byte-not-changed",
        "file": "shimgen/gates/patch.py",
        "old": "    for c in changes:\n        copy[c.byte.file_offset] = c.byte.new\n",
        "new": "    for c in changes[:1]:\n        copy[c.byte.file_offset] = c.byte.new\n",
        "tests": ["tests/gates/test_initsite.py::"
                  "test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads[set]"],
        "why": "the copy differs from the original in exactly the manifest's bytes",
    },
    {
        "name": "patch-manifest-sha-of-the-original",
        "file": "shimgen/gates/patch.py",
        "old": "\"sha256\": _sha256(bytes(copy))",
        "new": "\"sha256\": _sha256(image.contents)",
        "tests": ["tests/gates/test_initsite.py::"
                  "test_patch_copy_differs_in_exactly_the_manifest_bytes_and_loads[set]"],
        "why": "the manifest's sha256 of the copy is the copy's",
    },
    {
        "name": "patch-already-patched-not-recognised",
        "file": "shimgen/gates/patch.py",
        "old": "if wanted and all(h == c.byte.new for h, c in zip(have, wanted, strict=True)):",
        "new": "if False:",
        "tests": ["tests/gates/test_initsite.py::test_patch_refuses_foreign_and_already_patched_files"],
        "why": "a copy made earlier is named as already patched, not taken for a foreign file",
    },
    {
        "name": "init-plan-byte-not-among-the-checked",
        "file": "shimgen/gates/plan.py",
        "old": "return c.data[b.vaddr - c.vaddr] == b.old",
        "new": "return True",
        "tests": ["tests/gates/test_gate_init_fake.py::test_plan_with_an_unchecked_init_byte_is_refused"],
        "why": "every byte the init method writes is compared, as shipped, before any write",
    },
    {
        "name": "init-profile-file-proof-trusted",
        "file": "shimgen/gates/plan.py",
        "old": "        if problems:\n",
        "new": "        if False:\n",
        "tests": ["tests/gates/test_initsite.py::"
                  "test_a_profile_files_init_change_is_proven_again_at_build"],
        "why": "an init-site change from a profile file is proven again before it is baked in",
    },
    {
        "name": "init-merge-of-more-than-the-bit-dropped",
        "file": "shimgen/gates/initsite.py",
        "old": "w.keep != (~mask & 0xFF) or len(m.bytes) != 2",
        "new": "len(m.bytes) != 2",
        "tests": ["tests/gates/test_initsite.py::"
                  "test_mask_drops_the_merge_of_a_computed_bit_only_when_exact"],
        "why": "a merge is dropped only when the register it brings in can hold the gate's "
               "bit alone",
    },
    {
        "name": "init-merge-flags-read-after-ignored",
        "file": "shimgen/gates/initsite.py",
        "old": "        if {ins.reg_name(r) for r in read} & FLAG_REGS:\n            return None\n",
        "new": "",
        "tests": ["tests/gates/test_initsite.py::"
                  "test_mask_drops_the_merge_of_a_computed_bit_only_when_exact"],
        "why": "a merge whose flags are read afterwards is not changed",
    },
    # ---- timed calls that end in any order (runtime/arch/x86_64/timing.S) ----
    {
        "name": "timing-frame-not-linked-back",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        mov     %rdx, FRAME_NEXT(%rsi)\n",
        "new": "",
        "tests": ["tests/runtime/test_faults_timing.py::test_coroutines_suspended_inside_driver_calls"],
        "why": "coroutines suspended inside timed calls return to the right place, counted",
    },
    # ---- valid JSON for any path (runtime/output/output.c) ----
    {
        "name": "json-quote-not-escaped",
        "file": "runtime/output/output.c",
        "old": "if (*p == '\"' || *p == '\\\\') {",
        "new": "if (*p == '\\\\') {",
        "tests": ["tests/runtime/test_faults_output.py::test_any_driver_path_gives_valid_json"],
        "why": "every trace and timeline is valid JSON whatever the driver's path holds",
    },
    # ---- gate identity at run time (runtime/gates/gates.c) ----
    {
        "name": "gates-run-first-window-only",
        "file": "runtime/gates/gates.c",
        "old": "for (unsigned i = 0; i < plan->nchecks; i++) {",
        "new": "for (unsigned i = 0; i < plan->nchecks && i < 1; i++) {",
        "tests": ["tests/gates/test_gate_runtime.py::test_a_window_other_than_the_first_is_checked"],
        "why": "no write to driver memory unless every recorded instruction window matches",
    },
    {
        "name": "gates-run-first-byte-of-each-window",
        "file": "runtime/gates/gates.c",
        "old": "plan->checks[i].len) != 0) {",
        "new": "1) != 0) {",
        "tests": ["tests/gates/test_gate_runtime.py::test_a_window_other_than_the_first_is_checked"
                  "[last-byte-of-last-window]"],
        "why": "every recorded byte is compared, not only the first of a window",
    },
    {
        "name": "gates-run-no-byte-check",
        "file": "runtime/gates/gates.c",
        "old": "for (unsigned i = 0; i < plan->nchecks; i++) {",
        "new": "for (unsigned i = plan->nchecks; i < plan->nchecks; i++) {",
        "tests": ["tests/gates/test_gate_runtime.py::test_mismatched_driver_writes_nothing[bytes]",
                  "tests/gates/test_gate_runtime.py::test_a_window_other_than_the_first_is_checked"],
        "why": "a driver with the right build-id but other code is not written to",
    },
    {
        "name": "gates-run-no-build-id-check",
        "file": "runtime/gates/gates.c",
        "old": "if (strcmp(loaded_build_id, plan->build_id) != 0) {",
        "new": "if (0) {",
        "tests": ["tests/gates/test_gate_runtime.py::test_mismatched_driver_writes_nothing[build-id]"],
        "why": "a driver with another build-id is not written to",
    },
    # ---- gate identity at build time (shimgen/gates/plan.py) ----
    {
        "name": "gates-build-no-byte-check",
        "file": "shimgen/gates/plan.py",
        "old": "if image.contents[c.file_offset:c.file_offset + len(c.data)] != c.data:",
        "new": "if False:",
        "tests": ["tests/gates/test_gate_runtime.py::"
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
        "tests": ["tests/gates/test_gate_runtime.py::"
                  "test_profile_with_one_byte_changed_is_refused_at_build[-1]"],
        "why": "every recorded window of a profile is compared with the driver file",
    },
    {
        "name": "gates-build-no-build-id-check",
        "file": "shimgen/gates/plan.py",
        "old": "if plan.build_id != image.build_id:",
        "new": "if False:",
        "tests": ["tests/gates/test_gate_runtime.py::test_plan_for_another_file_is_refused_at_build"],
        "why": "a profile of another driver build is refused, naming the build-id",
    },
    # ---- the dlopen redirect's edges (runtime/load/dlopen.c) ----
    {
        "name": "redirect-any-libcuda-prefix",
        "file": "runtime/load/dlopen.c",
        "old": 'strncmp(base, "libcuda.so", 10) == 0',
        "new": 'strncmp(base, "libcuda", 7) == 0',
        "tests": ["tests/runtime/test_redirect.py::test_other_bare_names_are_not_redirected"],
        "why": "libcudart.so.12, libcudadebugger.so.1 ... are never handed the shim",
    },
    {
        "name": "redirect-only-libcuda.so.1",
        "file": "runtime/load/dlopen.c",
        "old": 'strncmp(base, "libcuda.so", 10) == 0',
        "new": 'strcmp(base, "libcuda.so.1") == 0',
        "tests": ["tests/runtime/test_redirect.py::"
                  "test_libcuda_names_and_paths_to_the_driver_are_redirected"],
        "why": "dlopen(\"libcuda.so\") (perftest) and other libcuda.so* names get the shim",
    },
    {
        "name": "redirect-paths-by-name",
        "file": "runtime/load/dlopen.c",
        "old": "    if (!slash)\n",
        "new": "    if (!slash || strncmp(base, \"libcuda.so\", 10) == 0)\n",
        "tests": ["tests/runtime/test_redirect.py::"
                  "test_paths_that_are_not_the_driver_are_not_redirected"],
        "why": "a path is redirected only when it is the driver's file, not for its name",
    },
    {
        "name": "redirect-no-path-to-driver",
        "file": "runtime/load/dlopen.c",
        "old": "st.st_ino == shimgen_cfg.driver_stat.st_ino)",
        "new": "st.st_ino == shimgen_cfg.driver_stat.st_ino + 1)",
        "tests": ["tests/runtime/test_redirect.py::"
                  "test_libcuda_names_and_paths_to_the_driver_are_redirected"],
        "why": "any path to the real driver's file, whatever its name, gets the shim",
    },
    # ---- cuGetProcAddress answers the exact variant (runtime/load/hooks_proc_address.c) ----
    {
        "name": "procaddr-v2-drops-per-thread-stream-flag",
        "file": "runtime/load/hooks_proc_address.c",
        "old": "real(symbol, pfn, version, flags, status);",
        "new": "real(symbol, pfn, version, flags & ~2ull, status);",
        "tests": ["tests/runtime/test_shim.py::test_cu_get_proc_address_matches_real_driver"],
        "why": "cuGetProcAddress_v2 hands out the _ptsz/_ptds variant the driver would",
    },
    {
        "name": "procaddr-v1-older-version",
        "file": "runtime/load/hooks_proc_address.c",
        "old": "real(symbol, pfn, version, flags);",
        "new": "real(symbol, pfn, version < 3020 ? version : 3010, flags);",
        "tests": ["tests/runtime/test_shim.py::test_cu_get_proc_address_matches_real_driver"],
        "why": "cuGetProcAddress hands out cuMemAlloc_v2, not cuMemAlloc, at version 12000",
    },
    {
        "name": "procaddr-unmapped-not-counted",
        "file": "runtime/load/procaddr.c",
        "old": "__atomic_fetch_add(&shimgen_unmapped_proc_addresses, 1, __ATOMIC_RELAXED);",
        "new": "__atomic_fetch_add(&shimgen_unmapped_proc_addresses, 0, __ATOMIC_RELAXED);",
        "tests": ["tests/runtime/test_timing.py::test_shim_preserves_arguments_and_results[1]"],
        "why": "an answer that is no export is counted in unmapped_proc_addresses",
    },
    # ---- two shims: the promised message (runtime/load/driver.c) ----
    {
        "name": "two-shims-message-dropped",
        "file": "runtime/load/driver.c",
        "old": '        shimgen_say("shimgen: another shim (%s) is preloaded',
        "new": '        if (0) shimgen_say("shimgen: another shim (%s) is preloaded',
        "tests": ["tests/runtime/test_redirect.py::test_two_shims_say_exactly_the_promised_line"],
        "why": "with two shims, A says the one documented line naming B",
    },
    # ---- per-thread blocks, claimed and listed without a lock (runtime/stats/stats.c) ----
    {
        "name": "stats-free-block-claim-not-atomic",
        "file": "runtime/stats/stats.c",
        "old": "        if (__atomic_compare_exchange_n(&s->state, &expected, BLOCK_LIVE, 0, "
               "__ATOMIC_ACQUIRE,\n                                        __ATOMIC_RELAXED)) {\n",
        "new": "        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == expected &&\n"
               "            (__atomic_store_n(&s->state, BLOCK_LIVE, __ATOMIC_RELAXED), 1)) {\n",
        "tests": ["tests/runtime/test_races.py::test_threads_race_for_freed_blocks"],
        "why": "two threads never share a block: a freed block is claimed by one thread only",
    },
    {
        "name": "stats-free-block-claimed-unchecked",
        "file": "runtime/stats/stats.c",
        "old": "        if (__atomic_compare_exchange_n(&s->state, &expected, BLOCK_LIVE, 0, "
               "__ATOMIC_ACQUIRE,\n                                        __ATOMIC_RELAXED)) {\n",
        "new": "        if ((void)expected, __atomic_store_n(&s->state, BLOCK_LIVE, "
               "__ATOMIC_RELAXED), 1) {\n",
        "tests": ["tests/runtime/test_races.py::test_threads_race_for_freed_blocks"],
        "why": "a block in use by a live thread is never handed to another",
    },
    # ---- the driver is loaded once, by one of the threads of the first calls (runtime/load/driver.c)
    {
        "name": "driver-load-claimed-without-cas",
        "file": "runtime/load/driver.c",
        "old": "        if (__atomic_compare_exchange_n(&load_state, &expect, LOAD_RUNNING, 0, "
               "__ATOMIC_ACQ_REL,\n                                        __ATOMIC_ACQUIRE)) {\n",
        "new": "        if ((void)expect, __atomic_store_n(&load_state, LOAD_RUNNING, "
               "__ATOMIC_RELEASE), 1) {\n",
        "tests": ["tests/runtime/test_races.py::test_sixty_four_first_calls_load_the_driver_once"],
        "why": "the driver is loaded once however many threads make the first call at once",
    },
    # ---- a forked child reports its own calls (runtime/stats/totals.c) ----
    {
        "name": "fork-child-keeps-parent-time-totals",
        "file": "runtime/stats/totals.c",
        "old": '        memset(&shimgen_fn_totals[i], 0, sizeof shimgen_fn_totals[i]);\n',
        "new": '        shimgen_fn_totals[i].max = 0;\n',
        "tests": ["tests/runtime/test_races.py::test_forked_child_times_only_its_own_calls"],
        "why": "a forked child's trace times its own calls, not its parent's",
    },
    {
        "name": "fork-child-keeps-parent-time-max",
        "file": "runtime/stats/totals.c",
        "old": '        memset(&shimgen_fn_totals[i], 0, sizeof shimgen_fn_totals[i]);\n',
        "new": '        shimgen_fn_totals[i].total = 0;\n',
        "tests": ["tests/runtime/test_races.py::test_forked_child_times_only_its_own_calls"],
        "why": "a forked child's maximum call time is of its own calls",
    },
    # ---- builds into one output root at once (shimgen/shim/build.py) ----
    {
        "name": "build-staging-not-locked",
        "file": "shimgen/shim/build.py",
        "old": "                fcntl.flock(staging_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n",
        "new": "                pass\n",
        "tests": ["tests/pipeline/test_bad_output.py::test_concurrent_builds_into_one_place"],
        "why": "a build's staging directory is never taken for a stale one while it runs",
    },
    {
        "name": "install-fsyncs-one-directory",
        "file": "shimgen/shim/install.py",
        "old": "    paths = [os.path.join(dirpath, f) for dirpath, _dirs, files in os.walk(root) for f in files]\n",
        "new": "    paths = [os.path.join(root, f) for f in os.listdir(root) if os.path.isfile(os.path.join(root, f))]\n",
        "tests": ["tests/pipeline/test_install_fsync.py::test_every_file_of_the_tree_is_flushed"],
        "why": "every file of a new build is on disk before it replaces the old one",
    },
    {
        "name": "install-fsync-error-lost",
        "file": "shimgen/shim/install.py",
        "old": "        for _ in pool.map(_fsync_file, paths):\n            pass\n",
        "new": "        pool.map(_fsync_file, paths)\n",
        "tests": ["tests/pipeline/test_install_fsync.py::test_a_failed_flush_fails_the_install"],
        "why": "a build that could not be flushed to disk is not installed",
    },
    # ---- error returns and latency histograms of the time paths (runtime/arch/x86_64/timing.S, stats/totals.c) ----
    {
        "name": "errors-path-skipped",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        jnz     .L\\name\\()_error\n",
        "new": "",
        "tests": ["tests/runtime/test_errors.py::test_each_code_counted_and_a_function_without_cuResult"
                  "_never[time]"],
        "why": "every non-success return of a CUresult function is counted",
    },
    {
        "name": "errors-flag-table-ignored",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        cmpb    $0, (%rcx,%rdi)\n        je      2b\n",
        "new": "",
        "tests": ["tests/runtime/test_errors.py::test_each_code_counted_and_a_function_without_cuResult"
                  "_never[timeline]"],
        "why": "a function that returns no CUresult never has its eax counted as an error",
    },
    {
        "name": "errors-overflow-not-counted",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        incq    TS_ERR_OVERFLOW(%r10)",
        "new": "        nop",
        "tests": ["tests/runtime/test_errors.py::test_more_codes_than_slots_go_to_the_overflow"],
        "why": "error returns that find every slot taken are counted in error_overflow",
    },
    {
        "name": "hist-wrong-bucket",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        lea     (%rax,%rcx,TS_HIST_IDX_SCALE), %rdx /* i * TS_HIST_BUCKETS + e */\n",
        "new": "        lea     1(%rax,%rcx,TS_HIST_IDX_SCALE), %rdx\n",
        "tests": ["tests/runtime/test_fine_full.py::test_calls_the_fine_table_cannot_hold_are_in_the_log2_histogram"],
        "why": "a call of 2^b to 2^(b+1) ticks that the fine table cannot hold is counted in bucket b",
    },
    {
        "name": "trace-file-readable-by-others",
        "file": "runtime/output/output.c",
        "old": "O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);",
        "new": "O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);",
        "tests": ["tests/runtime/test_faults_files.py::test_trace_file_is_created_0600_by_the_user"],
        "why": "a trace file is the user's alone",
    },
    {
        "name": "percentile-not-the-reports",
        "file": "runtime/stats/quantiles.c",
        "old": "            return lo + (hi - lo) * (want - below) / (double)s[k].n;\n",
        "new": "            return (lo ? lo : 1.0) * 1.4142135623730951;\n",
        "tests": ["tests/runtime/test_errors.py::test_histogram_bucket_of_a_call_of_known_length[time]"],
        "why": "the shim's p50 and p99 are computed as shimgen report computes them",
    },
    {
        "name": "hist-not-cleared-on-reuse",
        "file": "runtime/stats/totals.c",
        "old": "                s->fine[k] = (struct fineslot){0, 0};\n",
        "new": "                (void)s;\n",
        "tests": ["tests/runtime/test_errors.py::test_blocks_reused_by_later_threads_fold_and_clear[time]"],
        "why": "a block reused by a later thread starts with empty histograms (its calls are in the fine table)",
    },
    {
        "name": "errors-not-cleared-on-reuse",
        "file": "runtime/stats/totals.c",
        "old": "    memset(s->err, 0, sizeof s->err);\n",
        "new": "",
        "tests": ["tests/runtime/test_errors.py::test_blocks_reused_by_later_threads_fold_and_clear"
                  "[timeline]"],
        "why": "a block reused by a later thread starts with no error slots",
    },
    {
        "name": "fold-forgets-errors",
        "file": "runtime/stats/totals.c",
        "old": "            fold_error(s->err[e].key, s->err[e].count);",
        "new": "            (void)fold_error;",
        "tests": ["tests/runtime/test_errors.py::test_each_code_counted_and_a_function_without_cuResult"
                  "_never[time]"],
        "why": "a thread's error returns reach the trace written at exit",
    },
    {
        "name": "fork-keeps-parent-hist",
        "file": "runtime/stats/totals.c",
        "old": "            memset(shimgen_hist[i], 0, sizeof shimgen_hist[i]);\n",
        "new": "",
        "tests": ["tests/runtime/test_races.py::test_forked_child_times_only_its_own_calls"],
        "why": "a forked child's histograms hold its own calls only",
    },
    # ---- the benchmark's reported numbers (benchmarks/) ----
    {
        "name": "bench-time-variant-silently-dropped",
        "file": "benchmarks/suite.py",
        "old": 'if "not a known mode" in err:',
        "new": 'if "not a known mode" not in err:',
        "tests": ["tests/devtools/test_benchmarks.py::test_quick_call_timings_are_sane"],
        "why": "the time variant is measured, not left out as 'unavailable'",
    },
    {
        "name": "bench-bar-reports-best-not-worst",
        "file": "benchmarks/report.py",
        "old": "if worst is None or added > worst[0]:",
        "new": "if worst is None or added < worst[0]:",
        "tests": ["tests/devtools/test_benchmarks.py::test_quick_bars"],
        "why": "a bar is judged on the worst case measured",
    },
    # ---- shimgen report (report_model.py, report_source.py, report_format.py,
    # report_output.py, report_compare.py) ----
    {
        "name": "report-merge-drops-a-process",
        "file": "shimgen/report/model.py",
        "old": "    for p in processes:\n        counted = ",
        "new": "    for p in processes[1:]:\n        counted = ",
        "tests": ["tests/report/test_report.py::test_merge_counts_every_process"],
        "why": "a report sums every process of a run",
    },
    {
        "name": "report-percentile-off-by-a-bucket",
        "file": "shimgen/trace/model.py",
        "old": "    return (0 if b == 0 else 1 << b), 1 << (b + 1)",
        "new": "    return (0 if b == 0 else 1 << b), 1 << (b + 2)",
        "tests": ["tests/report/test_report.py::test_percentile_of_one_process_interpolates_within_the"
                  "_bucket",
                  "tests/report/test_report.py::test_percentiles_of_processes_with_different_ticks_merge"
                  "_by_ns_edges"],
        "why": "p50 and p99 interpolate within the right log2 bucket's edges",
    },
    {
        "name": "report-percentile-top-bucket-not-capped",
        "file": "shimgen/report/model.py",
        "old": "        hi = max(lo, min(hi, max_ns))",
        "new": "        hi = max(lo, hi)",
        "tests": ["tests/report/test_report.py::test_percentile_of_one_process_interpolates_within_the"
                  "_bucket"],
        "why": "the top bucket ends at the largest call, so no percentile exceeds max",
    },
    {
        "name": "report-merged-percentile-drops-top-buckets",
        "file": "shimgen/report/model.py",
        "old": "        for lo, hi, c in ticks[:-1]:\n            group[lo, hi]",
        "new": "        for lo, hi, c in ticks:\n            group[lo, hi]",
        "tests": ["tests/report/test_report.py::test_percentiles_of_processes_with_different_ticks_merge"
                  "_by_ns_edges"],
        "why": "each call of a merged histogram counts once",
    },
    {
        "name": "report-merged-percentile-density-never-ends",
        "file": "shimgen/report/model.py",
        "old": "            density[hi] = density.get(hi, 0.0) - c / (hi - lo)",
        "new": "            density[hi] = density.get(hi, 0.0) - 0.0",
        "tests": ["tests/report/test_report.py::test_percentiles_of_processes_with_different_ticks_merge"
                  "_by_ns_edges"],
        "why": "overlapping ranges of merged processes add up only where they overlap",
    },
    {
        "name": "report-compare-calls-before-errors",
        "file": "shimgen/report/compare.py",
        "old": "    return (-_delta(row[\"errors_a\"], row[\"errors_b\"]), "
               "-_delta(row[\"calls_a\"], row[\"calls_b\"]),",
        "new": "    return (-_delta(row[\"calls_a\"], row[\"calls_b\"]), "
               "-_delta(row[\"errors_a\"], row[\"errors_b\"]),",
        "tests": ["tests/report/test_report.py::test_compare_orders_errors_then_calls_then_time"],
        "why": "two runs compared: what changed most in errors first, then calls, then time",
    },
    {
        "name": "report-errors-section-first-code-only",
        "file": "shimgen/report/facts.py",
        "old": "for name, m in functions.items() for code, n in m.errors.items() if n]",
        "new": "for name, m in functions.items() for code, n in list(m.errors.items())[:1] if n]",
        "tests": ["tests/report/test_report.py::test_errors_section_names_every_code"],
        "why": "the errors section lists every (function, code) with non-success returns",
    },
    {
        "name": "report-by-rank-groups-by-pid",
        "file": "shimgen/report/model.py",
        "old": 'key = (str(p.pid) if by == "pid" else',
        "new": 'key = (str(p.pid) if by != "pid" else',
        "tests": ["tests/report/test_report.py::test_by_rank_and_by_pid_split_the_processes"],
        "why": "--by rank and --by pid split the processes by what they name",
    },
    {
        "name": "report-json-trace-hist-ignored",
        "file": "shimgen/trace/jsonfile.py",
        "old": "        if hist is not None:\n            fs.hist = hist + ",
        "new": "        if False:\n            fs.hist = hist + ",
        "tests": ["tests/report/test_report.py::test_merge_counts_every_process"],
        "why": "the extended JSON trace's histograms are read (p50 and p99 come from them)",
    },
    {
        "name": "report-directory-skips-traces-dir",
        "file": "shimgen/report/source.py",
        "old": "    for d in (directory, directory / TRACES):",
        "new": "    for d in (directory,):",
        "tests": ["tests/report/test_report.py::test_directory_reads_traces_and_skips_other_json_by"
                  "_content"],
        "why": "a run directory's traces are under traces/",
    },
    {
        "name": "report-truncated-trace-in-directory-skipped",
        "file": "shimgen/report/source.py",
        "old": "    except NotATrace:\n        if skip_other_json:",
        "new": "    except ShimgenError:\n        if skip_other_json:",
        "tests": ["tests/report/test_report_trust.py::"
                  "test_an_unreadable_trace_in_a_run_is_named_and_the_rest_reported[broken-json]"],
        "why": "a damaged trace in a run is named as unreadable, never silently left out of the "
               "totals",
    },
    {
        "name": "report-unreadable-trace-loses-the-run",
        "file": "shimgen/report/source.py",
        "old": ("        except Exception as e:  # noqa: BLE001 - a reader's mistake too: the file is left out\n"
                "            src.unreadable.append((str(f), left_out_why(e, f)))\n"),
        "new": ("        except ImportError as e:\n"
                "            src.unreadable.append((str(f), left_out_why(e, f)))\n"),
        "tests": ["tests/report/test_report_trust.py::"
                  "test_an_unreadable_trace_in_a_run_is_named_and_the_rest_reported[empty]"],
        "why": "one unreadable trace in a run is named, and every readable one is still reported",
    },
    {
        "name": "report-exec-counted-as-a-death",
        "file": "shimgen/report/model.py",
        "old": "        if t.proc_start is None or not t.boot_id:\n",
        "new": "        if True:\n",
        "tests": ["tests/report/test_report_trust.py::"
                  "test_a_process_that_execs_is_one_process_not_a_death"],
        "why": "the traces of a process that exec'd are one process, complete when its last "
               "program finished, not a death and another process",
    },
    # ---- a documented option is not skipped away (shimgen/cli.py) ----
    {
        "name": "cli-gates-option-renamed",
        "file": "shimgen/cliargs.py",
        "old": '    which.add_argument("--gate-profile", dest="gates",',
        "new": '    which.add_argument("--baked-gates", dest="gates",',
        "tests": ["tests/cli/test_bad_cli.py::test_malformed_or_foreign_gate_profile"],
        "why": "`shimgen build --gate-profile` is documented; its tests fail, not skip, without it",
    },
    # ---- the binary trace file (runtime/tracefile/tracefile.c, shimgen/trace/binary.py) ----
    {
        "name": "tracefile-child-writes-parents-file",
        "file": "runtime/stats/stats.c",
        "old": "    shimgen_tracefile_after_fork(shimgen_live_blocks);\n",
        "new": "",
        "tests": ["tests/runtime/test_tracefile.py::"
                  "test_fork_and_exec_trees_give_each_process_its_own_file[fork]"],
        "why": "a forked child counts into its own file, never its parent's",
    },
    {
        "name": "tracefile-block-private",
        "file": "runtime/tracefile/tracefile.c",
        "old": "PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);",
        "new": "PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, off);",
        "tests": ["tests/runtime/test_tracefile.py::"
                  "test_sigkill_leaves_exact_counts_and_reused_blocks_count_once"],
        "why": "the stubs count into the file's pages: a process killed by SIGKILL loses no count",
    },
    {
        "name": "tracefile-truncated-when-a-block-is-added",
        "file": "runtime/tracefile/tracefile.c",
        "old": "    if (fallocate(fd, 0, off, len) == 0)\n",
        "new": "    if (ftruncate(fd, off + len) == 0)\n",
        "tests": ["tests/runtime/test_tracefile.py::"
                  "test_sixty_four_first_calls_at_once_make_one_file"],
        "why": "the file only grows: two threads adding blocks at once never cut each other's off",
    },
    {
        "name": "tracefile-reused-block-counted-twice",
        "file": "runtime/stats/stats.c",
        "old": "        if (!shimgen_tracefile_ready()) {\n            shimgen_fold_block(s);\n",
        "new": "        shimgen_fold_block(s);\n        if (!shimgen_tracefile_ready()) {\n",
        "tests": ["tests/runtime/test_tracefile.py::"
                  "test_sigkill_leaves_exact_counts_and_reused_blocks_count_once"],
        "why": "a retired thread's counts stay in its block, found in the file exactly once",
    },
    {
        "name": "tracefile-retired-counts-kept-in-memory",
        "file": "runtime/stats/stats.c",
        "old": "        if (!shimgen_tracefile_ready()) {\n            shimgen_fold_block(s);\n",
        "new": "        if (1) {\n            shimgen_fold_block(s);\n",
        "tests": ["tests/runtime/test_tracefile.py::"
                  "test_sigkill_leaves_exact_counts_and_reused_blocks_count_once"],
        "why": "a retired thread's counts are in the file, not only in memory (lost on SIGKILL)",
    },
    {
        "name": "tracefile-reader-magic-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if m[:len(MAGIC)] != MAGIC:\n        raise BadTrace(\"it is not a shimgen trace file (wrong magic)\")\n",
        "new": "    if False:\n        raise BadTrace(\"it is not a shimgen trace file (wrong magic)\")\n",
        "tests": ["tests/report/test_tracefile_reader.py::"
                  "test_corrupt_header_is_refused[magic-SHIMTRC\\x00-words0]"],
        "why": "a file without the magic is refused",
    },
    {
        "name": "tracefile-reader-version-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if version not in TRACE_VERSIONS_READ:\n",
        "new": "    if version > VERSION + 1:\n",
        "tests": ["tests/report/test_tracefile_reader.py::"
                  "test_corrupt_header_is_refused[version-9-words1]",
                  "tests/report/test_tracefile_reader.py::"
                  "test_corrupt_header_is_refused[version-6-words25]"],
        "why": "a file of another format version (6 included, whose kernels 7 replaced) is "
               "refused, not misread",
    },
    {
        "name": "tracefile-reader-truncation-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": ("    elif (size - boff) % stride and not h[\"blocks_mapped\"] <= n < "
                "h[\"blocks_reserved\"]:\n"),
        "new": "    elif False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_truncated_file_is_refused[mid-block]",
                  "tests/report/test_tracefile_reader.py::test_truncated_file_is_refused[last-byte]"],
        "why": "a file cut short in its blocks is refused",
    },
    {
        "name": "tracefile-reader-block-count-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if not h[\"blocks_mapped\"] <= n <= h[\"blocks_reserved\"]:\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::"
                  "test_truncated_file_is_refused[whole-block]"],
        "why": "a file that lost whole blocks is refused (its header says how many it mapped)",
    },
    {
        "name": "held-signal-raised-at-once",
        "file": "shimgen/errors.py",
        "old": "    if _held:\n        _pending.append(signum)",
        "new": "    if False:\n        _pending.append(signum)",
        "tests": ["tests/pipeline/test_bad_output.py::test_a_held_signal_waits_even_when_another_thread"
                  "_takes_it"],
        "why": "a signal held back during an install waits for its end, whichever thread the "
               "kernel gave it to",
    },
    {
        "name": "held-signal-raised-at-the-inner-end",
        "file": "shimgen/errors.py",
        "old": "        if not _held and _pending:",
        "new": "        if _pending:",
        "tests": ["tests/pipeline/test_bad_output.py::test_a_held_signal_waits_even_when_another_thread"
                  "_takes_it"],
        "why": "nested holds: the signal comes at the end of the outermost one",
    },
    {
        "name": "gates-json-stdout-prints-the-table-too",
        "file": "shimgen/gates/report.py",
        "old": "        print(text, end=\"\")\n        return 0\n",
        "new": "        print(text, end=\"\")\n",
        "tests": ["tests/gates/test_gates.py::test_cli_json_without_a_file_prints_the_profile_alone"],
        "why": "`gates --json` alone prints the profile and nothing else",
    },
    {
        "name": "run-fast-parser-differs-from-argparse",
        "file": "shimgen/cliargs.py",
        "old": " or (o.choices and value not in o.choices):",
        "new": ":",
        "tests": ["tests/cli/test_cli_start.py::test_the_fast_run_parser_gives_what_argparse_gives"],
        "why": "`run`'s fast parser gives what argparse would, or leaves the line to argparse",
    },
    {
        "name": "run-fast-parser-takes-a-dash-value",
        "file": "shimgen/cliargs.py",
        "old": "            if i + 1 >= len(argv) or argv[i + 1].startswith(\"-\"):\n",
        "new": "            if i + 1 >= len(argv):\n",
        "tests": ["tests/cli/test_cli_start.py::test_the_fast_run_parser_gives_what_argparse_gives"],
        "why": "a separate value that starts with '-' is left to argparse, as it reads it",
    },
    # ---- a full disk said per process, impossible numbers refused (runtime/stats/stats.c,
    # ---- tracefile/tracefile.c, hooks/inject.c; shimgen/trace/binary.py, tracejson.py, report_format.py) ----
    {
        "name": "disk-full-calls-in-memory-not-in-the-header",
        "file": "runtime/stats/first.c",
        "old": "    shimgen_tracefile_missed(1);\n",
        "new": "",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_calls_in_memory_of_a_process_that_leaves_by__exit_are_said_missing"],
        "why": "calls counted in memory for want of a block are said in the file's header as "
               "they are counted: a process that leaves by _exit leaves a file that says so",
    },
    {
        "name": "disk-full-header-calls-missing-not-set-at-exit",
        "file": "runtime/tracefile/header.c",
        "old": "    h->calls_missing = calls_missing;\n",
        "new": "    (void)calls_missing;\n",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_calls_of_threads_that_found_the_disk_full_are_in_the_file_at_exit"],
        "why": "at exit the header says the calls the file lacks: none once the calls counted "
               "in memory are in a block",
    },
    {
        "name": "disk-full-reader-drops-calls-missing",
        "file": "shimgen/trace/binary.py",
        "old": "        calls_missing=h[\"calls_missing\"],\n",
        "new": "",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_calls_in_memory_of_a_process_that_leaves_by__exit_are_said_missing"],
        "why": "the reader gives the calls a file lacks, so the report says them per process",
    },
    {
        "name": "disk-full-no-note-of-a-process-without-a-file",
        "file": "runtime/tracefile/tracefile.c",
        "old": "            leave_note(dirfd, name);\n",
        "new": "            (void)leave_note;\n",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_a_process_with_no_room_for_its_file_leaves_a_note"],
        "why": "a process with no room for its trace file leaves <name>.nospace: the run knows "
               "it existed",
    },
    {
        "name": "disk-full-forked-child-keeps-an-empty-file",
        "file": "runtime/tracefile/fork.c",
        "old": "        unlinkat(AT_FDCWD, tf_path, 0);\n        if (e == ENOSPC || e == EDQUOT)\n"
               "            leave_note(AT_FDCWD, tf_path);\n",
        "new": "",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_a_forked_child_with_no_room_for_its_blocks_leaves_a_note"],
        "why": "a forked child with no room for its blocks leaves the note of no room, not a "
               "file that says it died with no calls",
    },
    {
        "name": "disk-full-child-of-a-blockless-parent-grows-nothing",
        "file": "runtime/tracefile/fork.c",
        "old": "    for (uint64_t k = 0; fd >= 0 && k < n && grown == 0; k++)\n",
        "new": "    for (uint64_t k = 0; fd >= 0 && k <= n && grown == 0; k++)\n",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_a_child_forked_from_a_process_without_a_block_says_its_calls_missing"],
        "why": "a child forked with no block to move keeps its file (it grows no block it "
               "does not have)",
    },
    {
        "name": "disk-full-calls-missing-at-exit-said-zero",
        "file": "runtime/stats/stats.c",
        "old": "    shimgen_tracefile_finish(outside);\n",
        "new": "    shimgen_tracefile_finish(0 * outside);\n",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_failures_injected_with_no_room_for_a_block_are_in_the_table_at_exit"],
        "why": "at exit the header says the calls no block could take, and the table is printed",
    },
    {
        "name": "reader-calls-missing-note-dropped",
        "file": "shimgen/trace/binary.py",
        "old": "        notes.append(missing_note(h[\"calls_missing\"], complete))\n",
        "new": "        pass\n",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_calls_in_memory_of_a_process_that_leaves_by__exit_are_said_missing"],
        "why": "a file that lacks calls has a note that says how many and why",
    },
    {
        "name": "disk-full-injected-failures-without-a-block-dropped",
        "file": "runtime/hooks/inject.c",
        "old": "    else if (shimgen_cfg.trace != TRACE_OFF)\n        shimgen_count_error(key);\n",
        "new": "",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_failures_injected_with_no_room_for_a_block_are_in_the_table_at_exit",
                  "tests/runtime/test_trace_disk_full.py::"
                  "test_failures_injected_on_threads_without_a_block_are_in_the_file_at_exit"],
        "why": "a failure injected on a thread without a block is counted in memory: in the "
               "table at exit, or in the file",
    },
    {
        "name": "disk-full-injected-failures-not-put-in-the-file",
        "file": "runtime/stats/stats.c",
        "old": "    shimgen_move_errors(s); /* the injected failures of those calls */\n",
        "new": "",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_failures_injected_on_threads_without_a_block_are_in_the_file_at_exit"],
        "why": "at exit the injected failures counted in memory go into a block with their calls",
    },
    {
        "name": "disk-full-untimed-blamed-on-the-shadow-stack",
        "file": "runtime/stats/trace.c",
        "old": "    uint64_t full = shimgen_untimed_calls > blockless ? shimgen_untimed_calls - "
               "blockless : 0;\n",
        "new": "    uint64_t full = shimgen_untimed_calls;\n",
        "tests": ["tests/runtime/test_trace_disk_full.py::"
                  "test_failures_injected_with_no_room_for_a_block_are_in_the_table_at_exit"],
        "why": "the table at exit says calls were not timed for want of a block, not that the "
               "shadow stack was full",
    },
    {
        "name": "report-calls-missing-said-exact",
        "file": "shimgen/report/format.py",
        "old": "    exact = [p.last for p in gone if p not in short]\n",
        "new": "    exact = [p.last for p in gone]\n",
        "tests": ["tests/report/test_report_trust.py::"
                  "test_a_process_with_calls_missing_is_never_said_exact"],
        "why": "a process whose calls are not all in its trace is never said to have counts "
               "exact",
    },
    {
        "name": "report-nospace-note-not-read",
        "file": "shimgen/report/source.py",
        "old": "                if e.name.endswith((TRACE_SUFFIX, TRACE_NOSPACE_SUFFIX)) or (\n",
        "new": "                if e.name.endswith(TRACE_SUFFIX) or (\n",
        "tests": ["tests/report/test_report_trust.py::"
                  "test_a_note_of_no_room_is_a_process_without_a_trace"],
        "why": "a run's <name>.nospace notes are processes without a trace",
    },
    {
        "name": "report-exec-drops-the-last-images-note",
        "file": "shimgen/report/model.py",
        "old": "            for t in p.traces[:-1]:  # ended by exec: not a death, no note of one\n",
        "new": "            for t in p.traces:  # ended by exec: not a death, no note of one\n",
        "tests": ["tests/report/test_report_trust.py::"
                  "test_a_process_whose_last_program_was_killed_did_not_finish",
                  "tests/report/test_report_runs.py::"
                  "test_a_process_whose_last_program_is_killed_after_exec_died"],
        "why": "a process whose last program was killed keeps its did-not-finish note",
    },
    {
        "name": "reader-failures-above-calls-accepted",
        "file": "shimgen/trace/binary.py",
        "old": "        if failed > calls + in_progress:\n",
        "new": "        if failed > calls + in_progress + (1 << 64):\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_impossible_numbers_are_refused"
                  "[injected-above]",
                  "tests/report/test_tracefile_reader.py::test_impossible_numbers_are_refused"
                  "[injected-2**64-1]"],
        "why": "a binary trace with more failures of a function than calls is refused",
    },
    {
        "name": "reader-failures-of-a-running-file-unbounded",
        "file": "shimgen/trace/binary.py",
        "old": "    _check_possible(functions, names, 0 if complete else nblocks)\n",
        "new": "    _check_possible(functions, names, 0 if complete else 1 << 64)\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_failures_as_many_as_calls_are_read"],
        "why": "a file not finished may count one failure in progress per block, no more",
    },
    {
        "name": "reader-success-as-a-failure-accepted",
        "file": "shimgen/trace/binary.py",
        "old": "            if per.get(0):\n",
        "new": "            if per.get(0) and False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_impossible_numbers_are_refused"
                  "[injected-success]",
                  "tests/report/test_tracefile_reader.py::test_impossible_numbers_are_refused"
                  "[error-success]"],
        "why": "a binary trace that lists CUDA_SUCCESS as a failure is refused",
    },
    {
        "name": "json-failures-above-calls-accepted",
        "file": "shimgen/trace/jsonfile.py",
        "old": "    if failed > fs.calls:\n",
        "new": "    if failed > fs.calls + (1 << 64):\n",
        "tests": ["tests/report/test_report_trust_numbers.py::"
                  "test_a_value_out_of_range_is_one_line_naming_the_file_and_key"
                  "[injected-above-calls]",
                  "tests/report/test_report_trust_numbers.py::"
                  "test_a_value_out_of_range_is_one_line_naming_the_file_and_key"
                  "[failures-2**64-1-of-3-calls]"],
        "why": "a JSON trace with more failures of a function than calls is refused",
    },
    {
        "name": "json-success-as-a-failure-accepted",
        "file": "shimgen/trace/jsonfile.py",
        "old": "        if 0 in per:\n",
        "new": "        if 0 in per and False:\n",
        "tests": ["tests/report/test_report_trust_numbers.py::"
                  "test_a_value_out_of_range_is_one_line_naming_the_file_and_key"
                  "[injected-success]",
                  "tests/report/test_report_trust_numbers.py::"
                  "test_a_value_out_of_range_is_one_line_naming_the_file_and_key"
                  "[error-success]"],
        "why": "a JSON trace that lists CUDA_SUCCESS as a failure is refused",
    },
    {
        "name": "driver-larger-than-any-libcuda-read",
        "file": "shimgen/driver/notes.py",
        "old": "        if st.st_size > MAX_LIBRARY_SIZE:\n",
        "new": "        if st.st_size > MAX_LIBRARY_SIZE << 40:\n",
        "tests": ["tests/cli/test_cli_inputs.py::"
                  "test_a_driver_larger_than_any_libcuda_is_one_line_in_every_command"],
        "why": "a driver file larger than any libcuda could be is refused in one line, before "
               "anything reads it",
    },
    {
        "name": "driver-read-whole",
        "file": "shimgen/driver/elf.py",
        "old": "        contents = mmap.mmap(fd, size, prot=mmap.PROT_READ)\n",
        "new": "        contents = os.pread(fd, size, 0)\n",
        "tests": ["tests/cli/test_cli_inputs.py::"
                  "test_a_driver_is_read_by_what_is_looked_at_not_by_its_size"],
        "why": "a driver is mapped, not read whole: memory is what is looked at",
    },
    {
        "name": "inject-c-result-counts-leading-zeros",
        "file": "runtime/hooks/inject_rules.c",
        "old": "        unsigned long long v = strlen(significant(s)) <= 10 ? strtoull(s, NULL, 10) : 0;\n",
        "new": "        unsigned long long v = n <= 10 ? strtoull(s, NULL, 10) : 0;\n",
        "tests": ["tests/runtime/test_inject.py::test_every_key"
                  "[cuDriverGetVersion=00000000002,nth=000000000000000000003-want14]"],
        "why": "a result written with leading zeros is its number (00000000002 is 2)",
    },
    {
        "name": "inject-c-number-counts-leading-zeros",
        "file": "runtime/hooks/inject_rules.c",
        "old": "    if (n == 0 || strlen(significant(s)) > 19 || strspn(s, \"0123456789\") != n)\n",
        "new": "    if (n == 0 || n > 19 || strspn(s, \"0123456789\") != n)\n",
        "tests": ["tests/runtime/test_inject.py::test_every_key"
                  "[cuDriverGetVersion=00000000002,nth=000000000000000000003-want14]"],
        "why": "a key's value written with leading zeros is its number",
    },
    {
        "name": "inject-python-result-counts-leading-zeros",
        "file": "shimgen/shim/inject.py",
        "old": "        code = int(text) if len(_significant(text)) <= 10 else RESULT_MAX + 1\n",
        "new": "        code = int(text) if len(text) <= 10 else RESULT_MAX + 1\n",
        "tests": ["tests/runtime/test_inject.py::test_leading_zeros_are_no_digits_of_the_number",
                  "tests/runtime/test_inject.py::test_c_and_python_agree"],
        "why": "`--inject` reads 00000000002 as 2, as the shim does",
    },
    {
        "name": "inject-refusal-printed-raw",
        "file": "runtime/hooks/inject.c",
        "old": "        escape_controls(shown, sizeof shown, bad, 300);\n",
        "new": "        snprintf(shown, sizeof shown, \"%.300s\", bad);\n",
        "tests": ["tests/runtime/test_inject.py::test_a_refused_rule_is_said_on_one_line_escaped"],
        "why": "a refused SHIMGEN_INJECT is one notice line, its control characters escaped",
    },
    {
        "name": "diff-full-tmpdir-said-as-compilation-terminated",
        "file": "shimgen/diff/procaddr.py",
        "old": "    if any(\"No space left on device\" in line for line in lines):\n",
        "new": "    if False:\n",
        "tests": ["tests/diff/test_diff_full_tmpdir.py::"
                  "test_a_full_tmpdir_is_said_with_its_directory"],
        "why": "a compiler with no room for its temporary files is said as such, with TMPDIR",
    },
    # ---- shimgen run: signals, exit status, the environment (shimgen/run/child.py) ----
    {
        "name": "run-terminal-signal-forwarded-again",
        "file": "shimgen/run/child.py",
        "old": "                if info.si_code in SENT_BY_A_PROCESS:\n",
        "new": "                if True:\n",
        "tests": ["tests/run/test_run.py::test_a_terminals_ctrl_c_reaches_the_command_once"],
        "why": "a terminal's Ctrl-C reaches the command once, not again from `run`",
    },
    {
        "name": "run-signal-not-forwarded",
        "file": "shimgen/run/child.py",
        "old": "                if info.si_code in SENT_BY_A_PROCESS:\n",
        "new": "                if info.si_code in SENT_BY_A_PROCESS and False:\n",
        "tests": ["tests/run/test_run.py::test_signals_sent_to_run_reach_the_command_exactly_once"],
        "why": "SIGINT, SIGTERM and SIGHUP sent to `run` reach the command",
    },
    {
        "name": "run-command-starts-with-signals-blocked",
        "file": "shimgen/run/child.py",
        "old": "pid = os.posix_spawn(path, argv, env, setsigmask=old,",
        "new": "pid = os.posix_spawn(path, argv, env,",
        "tests": ["tests/run/test_run.py::test_signals_sent_to_run_reach_the_command_exactly_once"],
        "why": "the command starts with the signal mask `run` was given, not the one it waits in",
    },
    {
        "name": "run-signalled-status-not-128-plus",
        "file": "shimgen/run/child.py",
        "old": "        return 128 + os.WTERMSIG(wait_status)\n",
        "new": "        return os.WTERMSIG(wait_status)\n",
        "tests": ["tests/run/test_run.py::test_exit_status_is_the_commands"],
        "why": "a command killed by signal N makes `run` exit 128+N, as a shell",
    },
    {
        "name": "run-preload-replaced-not-prepended",
        "file": "shimgen/run/child.py",
        "old": "env[ENV_PRELOAD] = f\"{shims}:{before}\" if before.strip() else shims",
        "new": "env[ENV_PRELOAD] = shims",
        "tests": ["tests/run/test_run.py::test_the_command_gets_the_shim_first_and_the_run_directory"],
        "why": "what LD_PRELOAD held is kept, after the shim",
    },
    {
        "name": "run-directory-with-files-taken",
        "file": "shimgen/run/directory.py",
        "old": "    if names and (me is None or RUN_JSON not in names):\n",
        "new": "    if False:\n",
        "tests": ["tests/run/test_run.py::test_an_existing_directory_with_files_is_refused"],
        "why": "`run -o DIR` never writes into a directory that holds files",
    },
    # ---- the shim cache (shimgen/cache/store.py; the default driver: driver_memo.py) ----
    {
        "name": "cache-key-without-gates",
        "file": "shimgen/cache/store.py",
        "old": "return f\"{self.build_id}-{self.version}-{self.gates or 'plain'}{hooks}\"",
        "new": "return f\"{self.build_id}-{self.version}{hooks}\"",
        "tests": ["tests/run/test_run_cache.py::test_gated_and_plain_shims_live_side_by_side",
                  "tests/run/test_run_cache.py::test_keys_differ_in_each_part"],
        "why": "a gated shim and a plain one have keys of their own and never replace each other",
    },
    {
        "name": "cache-short-library-used",
        "file": "shimgen/cache/store.py",
        "old": "            if st.st_size != manifest.get(\"library_size\"):\n",
        "new": "            if False:\n",
        "tests": ["tests/run/test_cache_trust.py::test_a_library_cut_short_is_rebuilt_before_it_is"
                  "_read"],
        "why": "a cached library cut short is rebuilt, and said so, before it is read whole",
    },
    {
        "name": "cache-built-again-after-the-wait",
        "file": "shimgen/cache/store.py",
        "old": "if not why and os.path.lexists(directory):  # another run built it meanwhile",
        "new": "if False:",
        "tests": ["tests/run/test_run_cache.py::test_first_runs_at_once_build_once"],
        "why": "first runs at once build once: the others use the entry they waited for",
    },
    {
        "name": "cache-interrupted-install-left-unsealed",
        "file": "shimgen/cache/store.py",
        "old": "                if e.installed:  # it came while the build was put in place: sealed, so that\n",
        "new": "                if False:\n",
        "tests": ["tests/run/test_run_cache.py::test_an_interrupt_while_the_build_is_put_in_place_"
                  "leaves_it_sealed_and_said"],
        "why": "an interrupt held back while a build is put in place leaves it sealed and usable",
    },
    {
        "name": "cache-default-driver-kept-after-ldconfig",
        "file": "shimgen/cache/memo.py",
        "old": "if stamp is not None and got[\"ld_so_cache\"] == stamp and os.path.exists(",
        "new": "if stamp is not None and os.path.exists(",
        "tests": ["tests/run/test_run_cache.py::test_the_default_driver_is_remembered_until_the_loader"
                  "_cache_changes"],
        "why": "the driver `run` picks by default is asked again once the loader's cache changed",
    },
    # ---- gate profiles: proof status, and the command line of gates and build ----
    {
        "name": "gates-unproven-profile-baked",
        "file": "shimgen/gates/plan.py",
        "old": "    if plan.proof != PROOF_PASSED and not allow_unproven:\n",
        "new": "    if plan.proof == PROOF_FAILED and not allow_unproven:\n",
        "tests": ["tests/gates/test_gate_profiles_cli.py::test_unproven_or_failed_profiles_are_refused"],
        "why": "a profile whose proof was not run is never baked without --allow-unproven-gates",
    },
    {
        "name": "gates-failed-proof-read-as-passed",
        "file": "shimgen/gates/profile.py",
        "old": "(PROOF_PASSED if self.proof.get(\"ok\") is True",
        "new": "(PROOF_PASSED if self.proof.get(\"ok\") is not None",
        "tests": ["tests/gates/test_gate_profiles_cli.py::test_unproven_or_failed_profiles_are_refused"],
        "why": "a profile whose proof failed is never read as proven",
    },
    {
        "name": "gates-no-proof-written-as-proven",
        "file": "shimgen/gates/report.py",
        "old": "profile.proof = {\"status\": PROOF_NOT_RUN, \"ok\": False,",
        "new": "profile.proof = {\"status\": \"passed\", \"ok\": True,",
        "tests": ["tests/gates/test_gate_profiles_cli.py::test_profiles_record_their_proof_status",
                  "tests/gates/test_gate_profiles_cli.py::test_unproven_or_failed_profiles_are_refused"],
        "why": "a profile written with --no-proof says that it is unproven",
    },
    {
        "name": "cli-empty-gates-builds-without",
        "file": "shimgen/cliargs.py",
        "old": "    if not value.strip():\n        raise type_error",
        "new": "    if False:\n        raise type_error",
        "tests": ["tests/gates/test_gate_profiles_cli.py::test_empty_gates_is_a_usage_error"],
        "why": "an empty --gates is a usage error, not a build without gates",
    },
    {
        "name": "gates-json-checked-after-the-analysis",
        "file": "shimgen/gates/report.py",
        "old": "        check_target(json_out, \"--json\", is_profile)\n",
        "new": "",
        "tests": ["tests/gates/test_gate_profiles_cli.py::test_json_into_a_missing_or_wrong_directory"
                  "_fails_first",
                  "tests/gates/test_gate_profiles_cli.py::test_json_never_clobbers_a_file_that_is_not"
                  "_a_profile"],
        "why": "shimgen gates refuses an output path before the analysis, and never clobbers "
               "a file that is not a profile",
    },
    {
        "name": "probe-child-line-wrapped-again",
        "file": "shimgen/probe/child.py",
        "old": "        if proc.returncode == 1 and said != last:",
        "new": "        if False:",
        "tests": ["tests/probe/test_probe_child.py::test_probe_on_a_machine_without_a_driver"],
        "why": "a probe child's one line is said once, with no doubled prefix",
    },
    {
        "name": "probe-no-driver-internal-error",
        "file": "shimgen/probe/gated.py",
        "old": "    except Exception:  # noqa: BLE001 - cuda-python could not load libcuda at all\n"
               "        raise ShimgenError(NO_DRIVER) from None\n",
        "new": "    except ImportError:\n        raise ShimgenError(NO_DRIVER) from None\n",
        "tests": ["tests/probe/test_probe_child.py::test_probe_without_a_driver_is_one_clear_line"],
        "why": "no driver is one line that says so, not an internal error naming a class",
    },
    # ---- the plain trace name: the first process of the job to write (runtime/output/claim.c) ----
    {
        "name": "claim-plain-name-never-taken",
        "file": "runtime/output/claim.c",
        "old": "    return S_ISREG(st.st_mode) && st.st_mtim.tv_sec == stored->tv_sec &&",
        "new": "    return 0 && st.st_mtim.tv_sec == stored->tv_sec &&",
        "tests": ["tests/runtime/test_faults_process.py::test_wrapper_process_leaves_the_plain_name_to_"
                  "the_program"],
        "why": "one process of a job takes the plain name; the others write <name>.<pid>",
    },
    {
        "name": "claim-plain-name-taken-without-the-lock",
        "file": "runtime/output/output.c",
        "old": "    if (lock == -2 || o->unstamped || shimgen_claim_taken(",
        "new": "    if (o->unstamped || shimgen_claim_taken(",
        "tests": ["tests/runtime/test_faults_files.py::"
                  "test_a_directory_locked_past_the_wait_gives_the_pid_name"],
        "why": "a writer that waited past LOCK_WAIT_MS for the directory's lock writes "
               "<name>.<pid>, never the plain name it could not check",
    },
    {
        "name": "claim-without-the-directory-lock",
        "file": "runtime/output/output.c",
        "old": "    int lock = shimgen_claim_lock(o->dirfd), e;",
        "new": "    int lock = -1, e;",
        "tests": ["tests/runtime/test_faults_process.py::test_writers_at_the_same_moment_take_the_plain"
                  "_name_once"],
        "why": "two processes of a job that write at the same moment never both take the "
               "plain name (one trace would be lost)",
    },
    {
        "name": "claim-forked-copy-takes-the-plain-name",
        "file": "runtime/output/output_name.c",
        "old": "    return getpid() != shimgen_cfg.load_pid;\n",
        "new": "    return 0;\n",
        "tests": ["tests/runtime/test_shim.py::test_calls_in_forked_children"],
        "why": "a program's forked copies write <name>.<pid>; the program keeps the plain name",
    },
    {
        "name": "claim-job-not-inherited",
        "file": "runtime/base/config.c",
        "old": "    if (v && *v >= '0' && *v <= '9') {",
        "new": "    if (0) {",
        "tests": ["tests/runtime/test_faults_process.py::test_wrapper_process_leaves_the_plain_name_to_"
                  "the_program"],
        "why": "the processes a job's first process starts are of the same job",
    },
    {
        "name": "trace-written-not-said",
        "file": "runtime/stats/trace.c",
        "old": "    shimgen_say(\"shimgen: trace written to %s\\n\", path);\n",
        "new": "",
        "tests": ["tests/runtime/test_faults_process.py::test_wrapper_process_leaves_the_plain_name_to_"
                  "the_program"],
        "why": "every JSON trace written says where",
    },
    {
        "name": "pyproject-license-table",
        "file": "pyproject.toml",
        "old": 'license = "MIT"',
        "new": 'license = { text = "MIT" }',
        "tests": ["tests/pipeline/test_packaging.py::test_wheel_builds_without_warnings_and_carries_"
                  "templates_and_runtime"],
        "why": "pip install prints no setuptools deprecation warning",
    },
    # ---- the tests' own probes: what they see must not depend on where the files lie ----
    {
        "name": "gateprobe-maps-by-a-part-of-the-path",
        "file": "tests/c/gateprobe.c",
        "old": "if (at >= 0 && strcmp(line + at, path) == 0)",
        "new": ("if (at >= 0 && strstr(line + at, strrchr(path, '/') + 1) "
                '&& !strstr(line + at, "shim"))'),
        "tests": ["tests/gates/test_gate_init_fake.py::"
                  "test_driver_mappings_are_found_by_the_whole_path_wherever_the_files_lie"],
        "why": "a file's mappings are picked by its whole path, so a checkout or scratch copy "
               "in a directory named like the shim neither hides the driver's nor passes "
               "whatever the code did",
    },
    # ---- times a user can trust: fine percentiles, a calibration made with the file ----
    {
        "name": "fine-histogram-not-counted",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        incl    TS_FINE+4(%r10,%rdx,8)\n",
        "new": "        nop\n",
        "tests": ["tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[json-time-clusters]",
                  "tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[dir-timeline-clusters]"],
        "why": "p50, p90 and p99 come from the fine buckets, within 3% of the exact values",
    },
    {
        "name": "fine-bucket-off-by-one-sub-bucket",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        sub     $TS_FINE_SUB_SHIFT, %ecx            /* e - 6 */\n",
        "new": "        sub     $(TS_FINE_SUB_SHIFT - 1), %ecx      /* e - 6 */\n",
        "tests": ["tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[json-time-clusters]"],
        "why": "a call is counted in the fine bucket that holds its length",
    },
    {
        "name": "fine-home-not-the-one-readers-probe",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        lea     TS_FINE_STEP(%rdx,%rax), %esi\n        mov     %esi, %edx\n",
        "new": "        lea     TS_FINE_STEP(%rdx,%rax), %esi\n        lea     4096(%rsi), %edx\n",
        "tests": ["tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[json-time-clusters]"],
        "why": "the time path counts a fine key from its own slot, the key modulo the table, where the fold looks",
    },
    {
        "name": "fine-key-of-another-function",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        lea     TS_FINE_STEP(%rdx,%rax), %esi\n",
        "new": "        lea     (TS_FINE_STEP * 2)(%rdx,%rax), %esi\n",
        "tests": ["tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[json-time-clusters]"],
        "why": "the time path's fine key is (i + 1) * TS_FINE_STEP + f, the one the readers look for",
    },
    {
        "name": "fine-miss-not-in-the-log2-bucket",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        incq    TS_HIST(%r10,%rdx,8)\n        jmp     10b\n",
        "new": "        jmp     10b\n",
        "tests": ["tests/runtime/test_fine_full.py::test_calls_the_fine_table_cannot_hold_are_in_the_log2_histogram"],
        "why": "a call the fine table has no slot for is counted in its log2 bucket, or it is in no histogram",
    },
    {
        "name": "fine-miss-counted-an-octave-up",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        add     $(TS_FINE_SUB_SHIFT - 1), %eax      /* e */\n",
        "new": "        add     $TS_FINE_SUB_SHIFT, %eax            /* e */\n",
        "tests": ["tests/runtime/test_fine_full.py::test_calls_the_fine_table_cannot_hold_are_in_the_log2_histogram"],
        "why": "the octave of fine bucket f (64 and up) is (f >> 6) + 5: the log2 bucket of the call's length",
    },
    {
        "name": "fold-fine-counts-not-in-the-log2-histogram",
        "file": "runtime/stats/totals.c",
        "old": "                __atomic_fetch_add(&shimgen_hist[i][fine_octave(fine_key_bucket(key))], n,\n                                   __ATOMIC_RELAXED);\n",
        "new": "",
        "tests": ["tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[json-time-clusters]"],
        "why": "a block's log2 row holds only the calls the fine table missed: the fold adds the fine counts to their octaves",
    },
    {
        "name": "reader-fine-counts-not-in-the-log2-histogram",
        "file": "shimgen/trace/blocks.py",
        "old": "                    hists.setdefault(fn - 1, [0] * HIST_BUCKETS)[fine_octave(f)] += n\n",
        "new": "                    hists.setdefault(fn - 1, [0] * HIST_BUCKETS)\n",
        "tests": ["tests/report/test_report_fine.py::test_version_8_keys_are_read_wherever_they_lie_and_fill_the"
                  "_log2_histogram",
                  "tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[dir-time-clusters]"],
        "why": "a version 8 block's log2 row holds only the calls the fine table missed: the reader adds the fine counts",
    },
    {
        "name": "reader-version-7-fine-keys-read-as-steps",
        "file": "shimgen/trace/blocks.py",
        "old": "    fstep = fhash if h[\"version\"] >= TRACE_FINE_STEP_FIRST else 0\n",
        "new": "    fstep = fhash\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_a_version_7_file_still_reads_its_fine_buckets"],
        "why": "a version 7 file's fine keys are (i + 1) << fine_bits | bucket from a hashed home, read as such",
    },
    {
        "name": "reader-fine-step-key-decoded-as-shift",
        "file": "shimgen/trace/blocks.py",
        "old": "                fn, f = divmod(key, step)\n",
        "new": "                fn, f = key >> 12, key & 4095\n",
        "tests": ["tests/report/test_report_fine.py::test_version_8_keys_are_read_wherever_they_lie_and_fill_the"
                  "_log2_histogram"],
        "why": "version 8's fine key is (i + 1) * step + bucket: its function and bucket are its quotient and rest",
    },
    {
        "name": "reader-fine-step-below-a-bucket-accepted",
        "file": "shimgen/trace/binary.py",
        "old": "            and not 1 << fb <= h[\"fine_hash\"]",
        "new": "            and not 0 <= h[\"fine_hash\"]",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused[fine_hash-4095-words26]"],
        "why": "a step below the buckets' bound would give two (function, bucket) pairs one key: refused, never misread",
    },
    {
        "name": "aarch64-fine-key-not-the-readers",
        "file": "runtime/arch/aarch64/timing.S",
        "old": "        add     w13, w13, w15                       /* the key */\n",
        "new": "        add     w13, w13, w15, lsl #1\n",
        "tests": ["tests/runtime/test_aarch64_timing.py::test_coroutines_end_timed_calls_in_any_order"],
        "why": "aarch64's time path counts a call under the fine key the fold and the readers look for",
    },
    {
        "name": "aarch64-fine-home-not-the-readers",
        "file": "runtime/arch/aarch64/timing.S",
        "old": "        mov     w17, w13                            /* its first slot (less its high bits) */\n",
        "new": "        add     w17, w13, #4095\n",
        "tests": ["tests/runtime/test_aarch64_timing.py::test_coroutines_end_timed_calls_in_any_order"],
        "why": "aarch64's time path counts a call from the home slot the fold and the readers probe",
    },
    {
        "name": "time-entry-nursery-taken-for-a-block",
        "file": "runtime/arch/x86_64/timing.S",
        "old": "        je      .L\\name\\()_first                  /* the nursery: no block yet */\n",
        "new": "",
        "tests": ["tests/runtime/test_timing.py::test_time_table_on_stderr"],
        "why": "a thread's first timed call, with the nursery and no block, takes the C path",
    },
    {
        "name": "shim-percentiles-ignore-fine-buckets",
        "file": "runtime/stats/quantiles.c",
        "old": "        if (sum == h[b]) {\n",
        "new": "        if (0) {\n",
        "tests": ["tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[json-time-clusters]"],
        "why": "the shim's table and JSON give percentiles from the fine buckets",
    },
    {
        "name": "report-percentiles-ignore-fine-buckets",
        "file": "shimgen/trace/model.py",
        "old": "        if fines and sum(n for _, n in fines) == calls:\n",
        "new": "        if False:\n",
        "tests": ["tests/runtime/test_times_exact.py::test_percentiles_are_within_3_percent_of_the_exact"
                  "_ones[dir-time-clusters]"],
        "why": "shimgen report gives percentiles from the fine buckets",
    },
    {
        "name": "report-fine-buckets-trusted-when-incomplete",
        "file": "shimgen/trace/model.py",
        "old": "        if fines and sum(n for _, n in fines) == calls:\n",
        "new": "        if fines:\n",
        "tests": ["tests/report/test_report_fine.py::test_an_octave_the_fine_table_missed_falls_back_"
                  "to_its_log2_bucket"],
        "why": "an octave whose fine buckets lack some calls uses its log2 bucket",
    },
    {
        "name": "calibration-with-the-file-not-waited-for",
        "file": "runtime/base/calib.c",
        "old": ("        if ((span && widths <= span / CALIB_PARTS) || end->ns - start->ns >= "
                "CALIB_MAX_NS)\n"),
        "new": ("        if (1 || (span && widths <= span / CALIB_PARTS) || end->ns - start->ns >= "
                "CALIB_MAX_NS)\n"),
        "tests": ["tests/report/test_tracefile_reader.py::test_the_calibration_made_with_the_file_"
                  "stands_in_for_a_torn_or_bad_last_one"],
        "why": "the reading made with the file is far enough from the first to be exact alone "
               "(a process killed early gets times exact to 0.5%)",
    },
    {
        "name": "disk-full-calls-left-out-at-exit",
        "file": "runtime/stats/stats.c",
        "old": "        if (!s)\n            return n ? n : 1;\n    }\n",
        "new": "        return n ? n : 1;\n    }\n",
        "tests": ["tests/runtime/test_trace_disk_full.py::test_calls_of_threads_that_found_the_disk_full_"
                  "are_in_the_file_at_exit[counts]"],
        "why": "calls counted in memory once the disk is full are added to the file at exit",
    },
    {
        "name": "disk-full-file-left-behind",
        "file": "runtime/tracefile/tracefile.c",
        "old": "        unlinkat(dirfd, name, 0);\n",
        "new": "",
        "tests": ["tests/runtime/test_trace_disk_full.py::test_a_file_that_cannot_be_grown_is_removed_and"
                  "_the_trace_printed"],
        "why": "a trace file the disk had no room for is removed, never left as damage",
    },
    # ---- trust in the shim cache: its checks (shimgen/cache/trust.py, owned.py), the seal ----
    {
        "name": "cache-cached-path-skips-the-directory-checks",
        "file": "shimgen/cache/store.py",
        "old": ("    dirs = cache_dirs(make=False)\n    if dirs is None:\n        return None\n"
                "    try:\n        gates, why = _check(dirs[1], key)\n"),
        "new": ("    dirs = (os.open(cache_root(), os.O_PATH), os.open(cache_root() / SHIMS, "
                "os.O_PATH)) if os.path.isdir(cache_root() / SHIMS) else None\n"
                "    if dirs is None:\n        return None\n"
                "    try:\n        gates, why = _check(dirs[1], key)\n"),
        "tests": ["tests/run/test_cache_trust.py::test_a_cache_directory_not_to_be_trusted_is_"
                  "refused_on_both_paths[shims-symlink-cached]",
                  "tests/run/test_cache_trust.py::test_a_cache_directory_not_to_be_trusted_is_"
                  "refused_on_both_paths[root-another-user-cached]"],
        "why": "the cached path refuses a cache root or shims/ that building would refuse",
    },
    {
        "name": "cache-another-users-file-loaded",
        "file": "shimgen/files/owned.py",
        "old": "    if st.st_uid != os.geteuid():\n        return ANOTHER_USER\n",
        "new": "    if False:\n        return ANOTHER_USER\n",
        "tests": ["tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt"
                  "_never_loaded[library-another-users-copy]"],
        "why": "a library another user owns is never preloaded, even with the right bytes",
    },
    {
        "name": "cache-seal-without-ctime",
        "file": "shimgen/cache/seal.py",
        "old": "    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]\n",
        "new": "    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]\n",
        "tests": ["tests/run/test_cache_trust.py::test_a_library_changed_in_place_is_rebuilt_never_run"
                  "[mtime-put-back]"],
        "why": "a library changed in place, its mtime put back, is never preloaded",
    },
    # ---- special files named by the environment or the command line ----
    {
        "name": "notice-file-of-any-kind-written",
        "file": "runtime/base/say.c",
        "old": "(fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())",
        "new": "(fstat(fd, &st) != 0 || st.st_uid != geteuid())",
        "tests": ["tests/runtime/test_special_files.py::test_a_fifo_as_the_notice_file_never_blocks_and_"
                  "is_never_written[reader]"],
        "why": "the shim writes its notices only into a regular file",
    },
    {
        "name": "driver-of-any-kind-handed-to-dlopen",
        "file": "runtime/load/driver.c",
        "old": "    if (strchr(path, '/') && !S_ISREG(st.st_mode)) {\n",
        "new": "    if (0) {\n",
        "tests": ["tests/runtime/test_special_files.py::test_a_special_file_as_the_driver_fails_the_"
                  "calls_at_once[device]"],
        "why": "only a regular file is handed to dlopen as the driver (a FIFO would block it)",
    },
    {
        "name": "trace-reader-reads-special-files",
        "file": "shimgen/trace/binary.py",
        "old": "        if not stat.S_ISREG(st.st_mode):\n",
        "new": "        if stat.S_ISDIR(st.st_mode):\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_a_fifo_or_a_device_is_refused_at_once"],
        "why": "the binary reader reads regular files only, and never blocks on a FIFO",
    },
    {
        "name": "trace-reader-reads-the-holes",
        "file": "shimgen/trace/blocks.py",
        "old": "            data = os.lseek(fd, boff + b * stride, os.SEEK_DATA)\n",
        "new": "            data = boff + b * stride\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_a_sparse_file_of_16_gib_is_read_in_the_"
                  "time_of_its_data"],
        "why": "the reader's time is that of the data present, not of a sparse file's size",
    },
    # ---- what a new user meets first: progress, usage, verdicts, numbers, messages ----
    {
        "name": "progress-on-a-pipe",
        "file": "shimgen/progress.py",
        "old": "        return sys.stderr is not None and sys.stderr.isatty()\n",
        "new": "        return sys.stderr is not None\n",
        "tests": ["tests/run/test_first_build.py::test_build_says_what_it_builds_first_and_nothing_more_on_a_pipe"],
        "why": "the steps of a build are shown on a terminal only: a pipe or a log gets the one line",
    },
    {
        "name": "build-not-announced",
        "file": "shimgen/shim/pipeline.py",
        "old": "        model = userhooks.attach(model, files)\n    _begin(driver.version, out_root, model, name)\n",
        "new": "        model = userhooks.attach(model, files)\n",
        "tests": ["tests/run/test_first_build.py::test_build_says_what_it_builds_first_and_nothing_more_on_a_pipe",
                  "tests/run/test_first_build.py::test_first_run_says_it_builds_before_it_does_and_a_cached_run_does_not"],
        "why": "a first build says what it is about to do before the seconds it takes",
    },
    {
        "name": "run-without-command-exits-1",
        "file": "shimgen/cli.py",
        "old": "        say(f\"{e} (see `shimgen {command} --help`)\")\n        return EXIT_USAGE\n",
        "new": "        say(f\"{e} (see `shimgen {command} --help`)\")\n        return EXIT_ERROR\n",
        "tests": ["tests/cli/test_bad_cli.py::test_run_without_a_command_is_a_usage_error[args0]"],
        "why": "a usage error exits 2 in every command, `run` without a command too",
    },
    {
        "name": "gates-listing-by-default",
        "file": "shimgen/gates/report.py",
        "old": "    if detail:\n",
        "new": "    if True:\n",
        "tests": ["tests/gates/test_gates_verdict.py::test_the_verdict_first_and_short"],
        "why": "`shimgen gates` says its verdict first and briefly; the listing is behind -v",
    },
    {
        "name": "report-percentiles-of-one-call-interpolated",
        "file": "shimgen/report/model.py",
        "old": "    if calls <= 2:\n",
        "new": "    if calls <= 0:\n",
        "tests": ["tests/report/test_few_calls.py::test_the_report",
                  "tests/report/test_few_calls.py::test_bounded_percentiles_of_few_and_many_calls"],
        "why": "one or two calls are known exactly: their percentiles are their own lengths",
    },
    {
        "name": "shim-percentiles-of-two-calls-interpolated",
        "file": "runtime/stats/quantiles.c",
        "old": "            p = qs[k] * 2.0 <= 1.0 ? low : top;\n",
        "new": "            p = p < low ? low : p > top ? top : p;\n",
        "tests": ["tests/report/test_few_calls.py::test_the_shims_table"],
        "why": "the shim's own table gives two calls their two exact lengths",
    },
    {
        "name": "diff-never-groups",
        "file": "shimgen/diff/main.py",
        "old": "GROUP_AT = 5\n",
        "new": "GROUP_AT = 10**9\n",
        "tests": ["tests/diff/test_diff_short.py::test_a_change_many_names_share_is_one_line"],
        "why": "a change many names share is one line with its count",
    },
    {
        "name": "diff-same-build-compared-in-full",
        "file": "shimgen/diff/main.py",
        "old": "        if line is not None:\n",
        "new": "        if line is not None and not line:\n",
        "tests": ["tests/diff/test_diff.py::test_a_driver_against_itself_has_no_differences[550.163.01]"],
        "why": "two files of one build answer at once, in one line",
    },
    {
        "name": "build-gates-takes-a-selection-as-a-profile",
        "file": "shimgen/shim/pipeline.py",
        "old": "    if value != \"auto\" and re.fullmatch(",
        "new": "    if False and re.fullmatch(",
        "tests": ["tests/cli/test_option_names.py::test_build_refuses_a_selection_and_names_the_way_that_works"],
        "why": "`build --gates gdr` is refused with the commands that take a selection, not read as a profile file named gdr",
    },
    {
        "name": "patch-of-a-patched-copy-not-said",
        "file": "shimgen/gates/patch.py",
        "old": "    if patched is not None:\n",
        "new": "    if patched is not None and not patched:\n",
        "tests": ["tests/gates/test_patch_messages.py::test_a_patched_copy_is_already_patched_with_or_without_a_profile"],
        "why": "a copy shimgen patch wrote is 'already patched', with or without --gate-profile",
    },
    {
        "name": "compare-counts-run-errors-gone",
        "file": "shimgen/report/compare.py",
        "old": "    return m.errors_known if m is not None else all(x.errors_known for x in fs.values())\n",
        "new": "    return True\n",
        "tests": ["tests/report/test_compare_modes.py::test_a_time_run_against_a_counts_run"],
        "why": "a counts run cannot know error counts: '-', never 'gone'",
    },
    {
        "name": "gates-nothing-applied-not-said",
        "file": "runtime/gates/hooks_gates.c",
        "old": "    else if (shimgen_gates_armed() && ",
        "new": "    else if (!shimgen_gates_armed() && ",
        "tests": ["tests/gates/test_gates_armed.py::test_armed_and_then_nothing_applied_when_cuinit_fails"],
        "why": "armed gates that cuInit's failure left unapplied are said once",
    },
    {
        "name": "hook-unexported-said-as-the-compilers",
        "file": "shimgen/shim/userhooks.py",
        "old": "    where = f\"{path}:{line.group(1)}\" if line else f\"hook file {path}\"\n",
        "new": "    where = f\"hook file {path}\"\n",
        "tests": ["tests/run/test_userhooks.py::test_refused_with_the_users_file_and_line[unexported]"],
        "why": "a hook naming a function the driver lacks is said where and what, in the user's terms",
    },
    {
        "name": "forked-file-blocks-claimed-after-growth",
        "file": "runtime/tracefile/fork.c",
        "old": "    if (fd >= 0)\n        tf_hdr->blocks_reserved = n;\n",
        "new": "",
        "tests": ["tests/report/test_report_runs.py::test_children_killed_while_they_make_their_files_"
                  "never_hide_the_others"],
        "why": "a child killed while its file grows leaves a file whose blocks its header "
               "accounts for",
    },
    # ---- what the README shows a user, and what the newest features print ----
    {
        "name": "readme-preload-relative",
        "file": "README.md",
        "old": "LD_PRELOAD=$(realpath build/",
        "new": "LD_PRELOAD=$(echo build/",
        "tests": ["tests/devtools/test_readme.py::test_the_preload_line_names_the_shim_by_an_absolute_path"],
        "why": "the README's LD_PRELOAD names the shim by a path that holds from any directory",
    },
    {
        "name": "build-time-said-unlike-the-readme",
        "file": "shimgen/progress.py",
        "old": 'BUILD_TAKES = "up to 15 s"\n',
        "new": 'BUILD_TAKES = "a few seconds"\n',
        "tests": ["tests/devtools/test_readme.py::"
                  "test_the_readme_shows_the_build_time_and_the_cache_key_a_user_sees"],
        "why": "the build line says the time the README gives for a first build",
    },
    {
        "name": "readme-cache-key-without-stamp",
        "file": "README.md",
        "old": "0.1.0+src.c05abeefa97fef8d-plain)",
        "new": "0.1.0-plain)",
        "tests": ["tests/devtools/test_readme.py::"
                  "test_the_readme_shows_the_build_time_and_the_cache_key_a_user_sees"],
        "why": "the README's cache key has the shape a user finds in the cache",
    },
    {
        "name": "run-line-says-trace-where-the-report-says-mode",
        "file": "shimgen/run/main.py",
        "old": 'f"mode {opts.trace}{opts.trace_note}{gates}; "',
        "new": 'f"trace {opts.trace}{opts.trace_note}{gates}; "',
        "tests": ["tests/report/test_compare_modes.py::test_a_time_run_against_a_counts_run"],
        "why": "the run's line and its report call the trace's mode by one word",
    },
    {
        "name": "compare-commands-unlabelled",
        "file": "shimgen/report/compare.py",
        "old": 'lines = source_header([a, b], "AB")',
        "new": "lines = source_header([a, b])",
        "tests": ["tests/report/test_compare_modes.py::test_a_time_run_against_a_counts_run"],
        "why": "two runs compared: each command line says whether it is A's or B's",
    },
    {
        "name": "stall-notice-without-command",
        "file": "shimgen/run/watch.py",
        "old": "command = command_line(p.pid, p.proc_start, p.boot_id)",
        "new": "command = None",
        "tests": ["tests/run/test_inflight.py::"
                  "test_stall_is_said_once_when_a_call_lasts_and_again_when_it_ends"],
        "why": "the --stall notice names the process by its command line, not its pid alone",
    },
    {
        "name": "readme-tier-times-without-their-machine",
        "file": "README.md",
        "old": "On a quiet 2-core machine (nothing else running) the default",
        "new": "On 2 cores the default",
        "tests": ["tests/devtools/test_readme.py::"
                  "test_the_tiers_times_say_the_machine_they_were_measured_on"],
        "why": "the README's tier times say they are a quiet machine's",
    },
    {
        "name": "by-pid-heading-without-command",
        "file": "shimgen/report/format.py",
        "old": '        title += (f": {command}" if command else\n',
        "new": '        title += ("" if command else\n',
        "tests": ["tests/report/test_report.py::"
                  "test_by_pid_heads_each_process_with_its_command_and_by_rank_says_there_are_none"],
        "why": "`report --by pid` heads each process's table with its command line",
    },
    {
        "name": "by-pid-live-command-not-read",
        "file": "shimgen/report/format.py",
        "old": "    said = command_line(p.pid, p.proc_start, p.boot_id)\n",
        "new": "    said = None\n",
        "tests": ["tests/run/test_inflight.py::"
                  "test_a_lasting_call_is_in_flight_and_after_sigkill_the_process_died_inside_it"],
        "why": "a process still running is headed with its own command line, not the run's",
    },
    {
        "name": "by-rank-without-ranks-says-rank-dash",
        "file": "shimgen/report/format.py",
        "old": '    if by == "rank" and g.key == "-":\n',
        "new": "    if False:\n",
        "tests": ["tests/report/test_report.py::"
                  "test_by_pid_heads_each_process_with_its_command_and_by_rank_says_there_are_none"],
        "why": "`--by rank` on processes without a rank says so, never `== rank - ==`",
    },
    {
        "name": "calls-key-line-left-out",
        "file": "shimgen/report/calls.py",
        "old": '    head += ["", key_line(times)] if n else [""]',
        "new": '    head += [""]',
        "tests": ["tests/report/test_calls_times.py::test_the_key_is_above_the_lines_and_says_what_the_first_number_is"],
        "why": "the calls lines have a key above them: what the first number and the bracket are",
    },
    {
        "name": "calls-relative-times-from-the-start",
        "file": "shimgen/report/calls_times.py",
        "old": 'yield f"{0.0 if before is None else t - before:.6f} {rest}"',
        "new": 'yield f"{t:.6f} {rest}"',
        "tests": ["tests/report/test_calls_times.py::test_relative_times_are_the_gaps_between_the_lines"],
        "why": "--times relative gives the seconds since the line before, as strace -r",
    },
    {
        "name": "calls-absolute-times-without-the-clock",
        "file": "shimgen/calls/records.py",
        "old": 'real_offset_ns=h["start_ns"] - h["calib_ns_a"])',
        "new": "real_offset_ns=0)",
        "tests": ["tests/report/test_calls_times.py::test_absolute_times_are_the_time_of_day_of_each_call"],
        "why": "--times absolute gives each call's time of day, from the file's realtime clock",
    },
    {
        "name": "driverfetch-path-fetches-every-driver",
        "file": "devtools/driverfetch.py",
        "old": "        wanted = [b for b in wanted if b.version == chosen[0]][:1]  # only the one named\n",
        "new": "",
        "tests": ["tests/devtools/test_driverfetch_cli.py::test_path_fetches_only_the_driver_it_names_and_says_so_first"],
        "why": "`driverfetch --path 550` fetches the one driver it prints, not all three",
    },
    {
        "name": "driverfetch-silent-before-the-fetch",
        "file": "devtools/driverfetch.py",
        "old": '    progress.announce(f"driverfetch: fetching {',
        "new": '    (lambda _: None)(f"driverfetch: fetching {',
        "tests": ["tests/devtools/test_driverfetch_cli.py::test_path_fetches_only_the_driver_it_names_and_says_so_first"],
        "why": "a fetch says what it fetches before the seconds it takes",
    },
    {
        "name": "driverfetch-arm64-not-said",
        "file": "devtools/driverfetch.py",
        "old": '        return self.package + ("" if self.arch == "amd64" else f":{self.arch}")',
        "new": "        return self.package",
        "tests": ["tests/devtools/test_driverfetch_cli.py::test_an_arm64_fetch_says_arm64"],
        "why": "an arm64 build is printed as PACKAGE:arm64, as the command line takes it",
    },
    {
        "name": "readme-driver-cache-ignores-xdg",
        "file": "README.md",
        "old": "kept in `${XDG_CACHE_HOME:-~/.cache}/shimgen/drivers`",
        "new": "kept in `~/.cache/shimgen/drivers`",
        "tests": ["tests/devtools/test_driverfetch_cli.py::test_the_readme_names_the_cache_as_xdg_places_it"],
        "why": "the README's driver cache is where driverfetch puts it with XDG_CACHE_HOME set",
    },
    {
        "name": "limit-untried-said-as-nothing-refused",
        "file": "shimgen/report/memory.py",
        "old": "    if not limits or refused or any(sum(d[\"by_function\"].values()) for d in devices):\n",
        "new": "    if True:\n",
        "tests": ["tests/run/test_memory_nogpu.py::"
                  "test_a_limit_the_driver_never_let_act_is_said_as_untried"],
        "why": "a limit the driver never let act (no GPU) is said as untried, not only 0 refused",
    },
    {
        "name": "memory-together-ignores-times",
        "file": "shimgen/report/memory.py",
        "old": "    return max((sum(n for s, u, n in spans if s <= start < u or s == start)\n",
        "new": "    return max((sum(n for s, u, n in spans)\n",
        "tests": ["tests/report/test_memory_together.py::test_processes_one_after_another_have_an_exact_peak"],
        "why": "processes one after another held together only the largest one's peak",
    },
    {
        "name": "memory-peak-line-is-the-largest-process",
        "file": "shimgen/report/memory.py",
        "old": "    lines = [\"\", f\"device memory  {_peak_text(m['peak_together_bytes'])}, at exit \"\n",
        "new": "    lines = [\"\", f\"device memory  peak {size_text(m['peak_bytes'])}, at exit \"\n",
        "tests": ["tests/report/test_memory_together.py::test_four_processes_at_once_are_bounded_and_each_has_its_own_line"],
        "why": "a run's peak is what its processes held together, never below what they held at exit",
    },
    {
        "name": "memory-died-process-let-go-at-its-start",
        "file": "shimgen/report/memory.py",
        "old": "            until = nxt if nxt is not None else t.end_ns if t.end_ns is not None else INF\n",
        "new": "            until = nxt if nxt is not None else t.end_ns if t.end_ns is not None else -INF\n",
        "tests": ["tests/report/test_memory_together.py::test_a_process_that_died_is_counted_as_holding_on"],
        "why": "a process that died may have held its peak to the end: the bound counts it",
    },
    {
        "name": "memory-own-peak-lines-left-out",
        "file": "shimgen/report/memory.py",
        "old": "    lines += _process_lines(m[\"processes\"])\n",
        "new": "",
        "tests": ["tests/report/test_memory_together.py::test_four_processes_at_once_are_bounded_and_each_has_its_own_line"],
        "why": "each process's own peak is on its own line",
    },
    {
        "name": "top-functions-counted-since-the-start",
        "file": "shimgen/top/functions.py",
        "old": "            n0, t0 = old.get(fn, (0, 0.0))\n",
        "new": "            n0, t0 = 0, 0.0\n",
        "tests": ["tests/report/test_top_functions.py::test_the_jobs_hottest_functions_over_the_window"],
        "why": "top's calls per second are the window's, not every call since the start",
    },
    {
        "name": "top-functions-pid-ignored",
        "file": "shimgen/top/functions.py",
        "old": "        if pid is not None and p.pid != pid:\n",
        "new": "        if False:\n",
        "tests": ["tests/report/test_top_functions.py::test_one_process_and_a_pid_the_run_lacks"],
        "why": "`top --pid N` shows that process's functions, not the job's",
    },
    {
        "name": "top-time-share-of-calls",
        "file": "shimgen/top/functions.py",
        "old": '"time_share": None if ns[fn] is None or not timed else ns[fn] / timed}',
        "new": '"time_share": None if ns[fn] is None or not timed else n / sum(calls.values())}',
        "tests": ["tests/report/test_top_functions.py::test_the_jobs_hottest_functions_over_the_window"],
        "why": "a function's time share is of the time in driver calls, not of the calls",
    },
    {
        "name": "top-pid-without-functions",
        "file": "shimgen/top/main.py",
        "old": "    hot = args.functions or args.pid is not None\n",
        "new": "    hot = args.functions\n",
        "tests": ["tests/report/test_top_functions.py::test_top_shows_a_running_jobs_hottest_functions"],
        "why": "`top --pid N` shows the hottest functions of that process",
    },
    {
        "name": "top-function-name-raw",
        "file": "shimgen/top/functions.py",
        "old": "             f\"{shown(r['function'], 80)}\" for r in found[:SHOWN]]",
        "new": "             f\"{r['function']}\" for r in found[:SHOWN]]",
        "tests": ["tests/report/test_calls_hostile_more.py::"
                  "test_in_flight_lines_top_and_stall_notices_escape_what_a_file_says"],
        "why": "a function's name from a trace file is escaped in top's functions table",
    },
    # ---- every command's start: the driver check, the standard descriptors, the guard ----
    {
        "name": "run-driver-check-left-to-the-cache-key",
        "file": "shimgen/run/main.py",
        "old": ("    driver = check_driver(opts.driver)  # every command's check, in the same "
                "words\n"),
        "new": "    driver = opts.driver.resolve()\n",
        "tests": ["tests/cli/test_cli_inputs.py::test_a_bad_driver_is_the_same_line_in_every_command"
                  "[dangling-symlink]",
                  "tests/cli/test_cli_inputs.py::test_a_bad_driver_is_the_same_line_in_every_command"
                  "[symlink-to-directory]"],
        "why": "`run` refuses a bad --driver in the words every other command uses",
    },
    {
        "name": "stderr-closed-lines-on-stdout",
        "file": "shimgen/__main__.py",
        "old": "        if sys.stderr is None:\n",
        "new": "        if False:\n",
        "tests": ["tests/cli/test_cli_inputs.py::test_with_stderr_closed_run_leaves_stdout_to_the_"
                  "command",
                  "tests/cli/test_cli_inputs.py::test_with_stderr_closed_an_error_line_never_reaches_"
                  "stdout[exports]"],
        "why": "with stderr closed, nothing of shimgen's reaches stdout, the command's",
    },
    {
        "name": "start-import-outside-the-guard",
        "file": "shimgen/__main__.py",
        "old": "try:\n    # The handler below uses _interrupted",
        "new": "import signal  # noqa: F401\ntry:\n    # The handler below uses _interrupted",
        "tests": ["tests/cli/test_cli_inputs.py::test_sigint_at_any_moment_of_shimgens_start_is_never_"
                  "its_traceback"],
        "why": "an interrupt at any moment of shimgen's start is one line, never a traceback",
    },
    # ---- guards a black-box run does not reach, tested where they are (tests/runtime/test_guards.py) ----
    {
        "name": "init-site-byte-not-compared-before-the-store",
        "file": "runtime/gates/gates_init.c",
        "old": "            if (*(const uint8_t *)(base + p[k].vaddr) != p[k].old) {\n",
        "new": "            if (0 && *(const uint8_t *)(base + p[k].vaddr) != p[k].old) {\n",
        "tests": ["tests/runtime/test_guards.py::test_init_site_bytes_are_compared_before_any_store"],
        "why": "the init-site writer stores nothing unless every selected byte holds the plan's "
               "old value, whatever the checks before it let through",
    },
    {
        "name": "init-site-bytes-not-put-back",
        "file": "runtime/gates/gates_init.c",
        "old": "                while (ndone--)\n",
        "new": "                while (0 && ndone--)\n",
        "tests": ["tests/runtime/test_guards.py::test_a_failed_store_puts_back_every_byte_already_"
                  "written"],
        "why": "when a store fails, every init-site byte already written holds its shipped "
               "value again: all the selection is changed, or none of it",
    },
    {
        "name": "procaddr-last-export-never-mapped",
        "file": "runtime/load/procaddr.c",
        "old": "    if (lo < addr_map_len && addr_map[lo].addr == a)\n",
        "new": "    if (lo + 1 < addr_map_len && addr_map[lo].addr == a)\n",
        "tests": ["tests/runtime/test_guards.py::test_proc_address_map_at_its_edges[1]",
                  "tests/runtime/test_guards.py::test_proc_address_map_at_its_edges[64]"],
        "why": "every export's address, the highest-addressed one included, is handed out as "
               "the shim's trampoline",
    },
    {
        "name": "tracefile-complete-before-the-fold",
        "file": "runtime/stats/stats.c",
        "old": ("    uint64_t outside = in_file ? put_outside_counts() : 0;\n"
                "    for (struct tstats *s = shimgen_live_blocks; s; s = s->next) {\n"),
        "new": ("    uint64_t outside = in_file ? put_outside_counts() : 0;\n"
                "    shimgen_tracefile_finish(outside); /* and again after the fold */\n"
                "    for (struct tstats *s = shimgen_live_blocks; s; s = s->next) {\n"),
        "tests": ["tests/runtime/test_guards.py::test_a_process_that_dies_while_its_exit_folds_the_"
                  "blocks_is_never_complete[die]"],
        "why": "a trace file is marked complete only after the exit counted every call into "
               "it: a process that dies in the fold leaves a file that says it died",
    },
    {
        "name": "fallback-driver-identity-not-recorded",
        "file": "runtime/load/driver.c",
        "old": ("                shimgen_cfg.driver_stat_ok =\n"
                "                    stat(shimgen_cfg.driver_path, &shimgen_cfg.driver_stat) "
                "== 0;\n"),
        "new": "",
        "tests": ["tests/runtime/test_guards.py::test_after_a_driver_upgrade_a_path_to_the_new_driver_"
                  "opens_the_shim"],
        "why": "after the fallback search loaded another driver, a path to that file opens the "
               "shim, not the real driver beside it",
    },
    # ---- shimgen run: the runs directory, the shim's path, a command that cannot start,
    # ---- signals around the command, and what the report prints ----
    {
        "name": "run-runs-directory-group-may-write",
        "file": "shimgen/files/owned.py",
        "old": "    if st.st_mode & 0o022:\n        return OPEN_TO_OTHERS\n",
        "new": "    if st.st_mode & 0o002:\n        return OPEN_TO_OTHERS\n",
        "tests": ["tests/run/test_run_safety.py::test_a_runs_directory_others_can_write_or_not_a_"
                  "directory_is_refused[0770]"],
        "why": "the default runs directory is used only when nobody but the user can write it",
    },
    {
        "name": "run-loader-tokens-by-name",
        "file": "shimgen/run/child.py",
        "old": '    if "$" in text:\n',
        "new": '    if "$LIB" in text or "$ORIGIN" in text:\n',
        "tests": ["tests/run/test_run_safety.py::test_a_loader_token_in_the_shims_path_is_refused_"
                  "before_anything[${ORIGIN}]"],
        "why": "any '$' in the shim's path is refused: the loader reads ${ORIGIN} too",
    },
    {
        "name": "run-leaves-the-directory-of-a-command-that-never-started",
        "file": "shimgen/run/main.py",
        "old": "        if not started_pid:  # nothing ran: nothing of this run is left\n",
        "new": "        if False:\n",
        "tests": ["tests/run/test_run_safety.py::test_a_command_that_cannot_start_is_one_line_and_"
                  "leaves_nothing[not-a-program]"],
        "why": "a command that cannot start leaves no run directory",
    },
    {
        "name": "run-signals-raised-again-after-the-command",
        "file": "shimgen/run/child.py",
        "old": ("            if signals is not None:\n"
                "                signals.append(_received(info, False))\n"),
        "new": ("            if signals is not None:\n"
                "                signals.append(_received(info, False))\n"
                "        signal.pthread_sigmask(signal.SIG_SETMASK, old)\n"),
        "tests": ["tests/run/test_run_safety.py::test_sigterm_to_the_group_at_any_moment_is_said_"
                  "truly"],
        "why": "a command that ran keeps its run directory and report, whatever signal comes",
    },
    {
        "name": "run-interrupted-build-said-in-the-cache",
        "file": "shimgen/run/main.py",
        "old": "        usable = lookup(key) is not None\n",
        "new": "        usable = True\n",
        "tests": ["tests/run/test_run_safety.py::test_sigterm_to_the_group_at_any_moment_is_said_"
                  "truly"],
        "why": "an interrupted first build says what the cache holds for the run's key",
    },
    {
        "name": "calls-report-says-a-dying-file-is-no-trace",
        "file": "shimgen/trace/binary.py",
        "old": "                if m[:len(MAGIC)] == bytes(len(MAGIC)):  # as load() says it\n",
        "new": "                if False:\n",
        "tests": ["tests/run/test_calls_sigkill.py::test_a_calls_trace_the_process_died_making_is_"
                  "said_so_by_every_view"],
        "why": "report --calls says a file the process died making is so, as report does",
    },
    {
        "name": "report-csv-names-raw",
        "file": "shimgen/report/output.py",
        "old": "    if isinstance(v, str):\n        return shown(v)\n",
        "new": "    if isinstance(v, str):\n        return v\n",
        "tests": ["tests/report/test_report_escaping.py::test_the_csv_escapes_every_string_and_stays_one_"
                  "row_per_function",
                  "tests/report/test_report_escaping.py::test_two_runs_compared_escape_every_string_they_"
                  "read[csv]"],
        "why": "no control character read from a trace reaches the terminal through the CSV",
    },
    {
        "name": "run-force-takes-any-directory",
        "file": "shimgen/run/replace.py",
        "old": "    other = [n for n in names if n not in (RUN_JSON, *RUN_FILES, *RUN_DIRS)]\n",
        "new": "    other = []\n",
        "tests": ["tests/run/test_run_force.py::test_force_removes_nothing_that_is_not_a_finished_run[a-file-of-the-user]"],
        "why": "--force removes a run directory only when it holds nothing a run does not make",
    },
    {
        "name": "run-force-takes-a-run-not-ended",
        "file": "shimgen/run/replace.py",
        "old": "    if data.get(\"end\") is None or data.get(\"exit\") is None:\n",
        "new": "    if False:\n",
        "tests": ["tests/run/test_run_force.py::test_force_removes_nothing_that_is_not_a_finished_run[not-ended]"],
        "why": "--force replaces a finished run only, never one that may still be running",
    },
    {
        "name": "run-force-takes-links-in-traces",
        "file": "shimgen/run/replace.py",
        "old": "                    if not _mine(ist, stat.S_ISREG):\n",
        "new": "                    if False:\n",
        "tests": ["tests/run/test_run_force.py::test_force_removes_nothing_that_is_not_a_finished_run[a-link-in-traces]"],
        "why": "traces/ of a run replaced holds only regular files of the user's",
    },
    {
        "name": "run-force-removes-a-swapped-entry",
        "file": "shimgen/run/replace.py",
        "old": "        if entry_ident(st) != ident:\n            return\n",
        "new": "        pass\n",
        "tests": ["tests/run/test_run_force.py::test_an_entry_swapped_after_the_check_is_left"],
        "why": "--force removes what it checked, not a file put in its place since",
    },
    {
        "name": "run-dir-refusal-does-not-name-force",
        "file": "shimgen/run/directory.py",
        "old": "    elif names and not finished_run(fd)[0]:\n",
        "new": "    elif False:\n",
        "tests": ["tests/run/test_run_force.py::test_a_finished_run_is_refused_naming_force_and_replaced_with_it"],
        "why": "a run directory that holds a finished run is refused in a line naming --force",
    },
    # ---- guards on writes to driver memory, on what is loaded, on what a report says ----
    {
        "name": "struct-gates-written-without-activation",
        "file": "runtime/gates/gates.c",
        "old": "    if (!active)\n        return;\n    unsigned n = device_count();\n",
        "new": "    unsigned n = device_count();\n",
        "tests": ["tests/runtime/test_guards.py::test_an_attribute_hook_writes_no_gate_bit_unless_the_"
                  "struct_method_is_on[identity-refused]"],
        "why": "the struct method writes only once the identity check accepted the driver, "
               "whichever hook reaches it (a gate at its init site is left alone by its own "
               "guard: init-gate-written-in-the-structs-too)",
    },
    {
        "name": "struct-gates-activated-without-identity-check",
        "file": "runtime/gates/gates.c",
        "old": "    if (!shimgen_gates_verify(driver_base, loaded_build_id, why, sizeof why)) {\n",
        "new": "    if (!shimgen_gates_verify(driver_base, loaded_build_id, why, sizeof why)\n        && shimgen_cfg.gate_method != SHIMGEN_GATE_METHOD_STRUCT) {\n",
        "tests": ["tests/gates/test_gate_runtime.py::test_mismatched_driver_writes_nothing[bytes]",
                  "tests/gates/test_gate_runtime.py::test_mismatched_driver_writes_nothing[build-id]"],
        "why": "the struct method is switched on only for the driver the profile describes",
    },
    {
        "name": "init-gate-without-a-site-skipped",
        "file": "runtime/gates/gates_init.c",
        "old": "        if (!n && all) {\n",
        "new": "        if (!n && all && 0) {\n",
        "tests": ["tests/gates/test_gate_init_fake.py::test_init_all_refuses_the_whole_selection",
                  "tests/runtime/test_guards.py::test_a_gate_without_an_init_site_is_left_to_the_structs_unless_all_are_asked"],
        "why": "SHIMGEN_GATE_METHOD=init-all: a selected gate without a proven init site refuses the whole selection",
    },
    {
        "name": "init-gate-without-a-site-refuses-every-gate",
        "file": "runtime/gates/gates_init.c",
        "old": "        if (!n && all) {\n",
        "new": "        if (!n && (all || 1)) {\n",
        "tests": ["tests/gates/test_gate_init_fake.py::test_each_gate_goes_by_the_best_method_it_has",
                  "tests/runtime/test_guards.py::test_a_gate_without_an_init_site_is_left_to_the_structs_unless_all_are_asked"],
        "why": "SHIMGEN_GATE_METHOD=init: a gate without an init site goes to the structs, the others to their sites",
    },
    {
        "name": "init-gate-written-in-the-structs-too",
        "file": "runtime/gates/gates.c",
        "old": "        if (!plan->selection[g] || plan->at_init[g])\n",
        "new": "        if (!plan->selection[g])\n",
        "tests": ["tests/gates/test_gate_init_fake.py::test_each_gate_goes_by_the_best_method_it_has"],
        "why": "a gate applied at its init site is left to the driver: the struct method writes none of it (its global neither)",
    },
    {
        "name": "setsite-merge-into-the-other-register-dropped",
        "file": "shimgen/gates/initsite.py",
        "old": "if m is None or w.merged_into or",
        "new": "if m is None or",
        "tests": ["tests/gates/test_setsite.py::test_a_merge_into_the_other_register_is_not_dropped_by_the_mask"],
        "why": "a merge is dropped only when the run-time register is the source of the or",
    },
    {
        "name": "init-site-bytes-beyond-the-record",
        "file": "runtime/gates/gates_init.c",
        "old": "    if (total > sizeof done / sizeof done[0]) {\n",
        "new": "    if (0) {\n",
        "tests": ["tests/runtime/test_guards.py::test_more_bytes_than_a_selection_may_change_are_refused"],
        "why": "a selection changes no more bytes than the writer can put back",
    },
    {
        "name": "init-site-store-outside-the-drivers-segments",
        "file": "runtime/gates/gates_init.c",
        "old": "    if (q.prot < 0) {\n",
        "new": "    if (0) {\n",
        "tests": ["tests/runtime/test_guards.py::test_a_failed_store_puts_back_every_byte_already_"
                  "written"],
        "why": "no byte outside the driver's loaded segments is made writable or written",
    },
    {
        "name": "init-site-byte-left-when-the-protection-cannot-be-restored",
        "file": "runtime/gates/gates_init.c",
        "old": ("        __atomic_store_n((uint8_t *)addr, old, __ATOMIC_RELEASE); /* still "
                "writable */\n"),
        "new": "        (void)old;\n",
        "tests": ["tests/runtime/test_guards.py::test_a_protection_that_cannot_be_put_back_undoes_the_"
                  "whole_selection"],
        "why": "a byte whose page cannot be given its protection back is restored at once",
    },
    {
        "name": "driver-from-env-falls-back",
        "file": "runtime/load/driver.c",
        "old": "        if (!shimgen_cfg.driver_from_env &&\n            fallback_driver(",
        "new": "        if (fallback_driver(",
        "tests": ["tests/runtime/test_shim.py::test_missing_driver_at_run_time_fails_calls_not_process"
                  "[535.261.03]"],
        "why": "a SHIMGEN_DRIVER that cannot be loaded fails the calls; no other driver is "
               "searched for in its place",
    },
    {
        "name": "shim-file-loaded-as-the-driver",
        "file": "runtime/load/driver.c",
        "old": "    if (shimgen_file_is_shim(path)) {\n",
        "new": "    if (0) {\n",
        "tests": ["tests/runtime/test_faults_loading.py::test_shim_named_as_the_driver_fails_calls_at_"
                  "once[copy]",
                  "tests/runtime/test_faults_loading.py::test_a_shim_is_never_loaded_as_the_driver"],
        "why": "a copy of a shim is refused from its file, before it is loaded",
    },
    {
        "name": "shim-by-its-soname-loaded-as-the-driver",
        "file": "runtime/load/driver.c",
        "old": "    if (dlsym(h, shimgen_names[0]) == (void *)shimgen_entry_stubs[0]) {\n",
        "new": "    if (0) {\n",
        "tests": ["tests/runtime/test_faults_loading.py::test_shim_named_as_the_driver_fails_calls_at_"
                  "once[soname]"],
        "why": "a name that the loader resolves to the loaded shim is refused as the driver",
    },
    {
        "name": "selfcheck-mark-never-found",
        "file": "runtime/load/selfcheck.c",
        "old": "            found = notes_have_mark(buf, ph.p_filesz);\n",
        "new": "            found = 0 && notes_have_mark(buf, ph.p_filesz);\n",
        "tests": ["tests/runtime/test_faults_loading.py::test_shim_named_as_the_driver_fails_calls_at_"
                  "once[copy]",
                  "tests/runtime/test_faults_loading.py::test_a_shim_is_never_loaded_as_the_driver"],
        "why": "every shim's file is known by its mark before it could be loaded as the driver",
    },
    {
        "name": "report-percentiles-of-part-of-the-calls",
        "file": "shimgen/report/model.py",
        "old": "        if not self.hists or self.hist_calls != self.calls:\n",
        "new": "        if not self.hists:\n",
        "tests": ["tests/report/test_report.py::test_percentiles_need_every_call_in_a_histogram"],
        "why": "merged percentiles are given only when every call is in a histogram",
    },
    {
        "name": "report-counts-only-errors-shown-as-none",
        "file": "shimgen/report/model.py",
        "old": "            if not counted:\n                m.errors_known = False\n",
        "new": "            if False:\n                m.errors_known = False\n",
        "tests": ["tests/report/test_report.py::test_table_header_and_counts_only_dashes"],
        "why": "errors of counts-only traces are not recorded, never reported as none",
    },
    {
        "name": "report-counts-only-calls-taken-as-timed",
        "file": "shimgen/report/model.py",
        "old": ("            if fs.total_ns is not None:\n"
                "                m.timed_calls += fs.calls\n"
                "                m.total_ns += fs.total_ns\n"),
        "new": ("            m.timed_calls += fs.calls\n            if fs.total_ns is not None:\n"
                "                m.total_ns += fs.total_ns\n"),
        "tests": ["tests/report/test_report.py::test_table_header_and_counts_only_dashes"],
        "why": "a mean is over the calls that were timed; counts-only calls show no time",
    },
    {
        "name": "report-sum-past-a-float-not-named",
        "file": "shimgen/report/model.py",
        "old": ("        if not isfinite(m.total_ns) or (m.max_ns is not None and not "
                "isfinite(m.max_ns)):\n"),
        "new": "        if False:\n",
        "tests": ["tests/report/test_report_trust_numbers.py::test_times_that_add_up_past_a_float_are_"
                  "one_line"],
        "why": "a total that cannot be added up is one line naming the function and the trace",
    },
    {
        "name": "tracefile-reader-byte-order-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if h[\"byte_order\"] != BYTE_ORDER:\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[byte_order-578437695752307201-words7]"],
        "why": "a file of another byte order is refused, not misread",
    },
    {
        "name": "tracefile-reader-header-size-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if h[\"header_size\"] != hsize:\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[header_size-353184-words6]"],
        "why": "a header of another size is refused",
    },
    {
        "name": "tracefile-reader-function-count-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if not 0 < nf < 1 << 16:\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[nfuncs-0-words8]"],
        "why": "a function count out of range is refused by name",
    },
    {
        "name": "tracefile-reader-page-size-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if page < 4096 or page & (page - 1):\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[page_size-4095-words10]"],
        "why": "a page size that is no power of two from 4096 is refused",
    },
    {
        "name": "tracefile-reader-stride-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if not 0 < bs <= stride or stride % page or stride > 1 << 32:\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[block_stride-4096-words11]"],
        "why": "blocks that do not fit their stride are refused, never read across",
    },
    {
        "name": "tracefile-reader-blocks-offset-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if boff % page or boff < h[\"names_off\"] + h[\"names_size\"]:\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[blocks_off-4096-words12]"],
        "why": "blocks that overlap the names, or are not page-aligned, are refused",
    },
    {
        "name": "tracefile-reader-histogram-size-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if h[\"hist_buckets\"] != HIST_BUCKETS or h[\"off_count\"] != 0:\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[hist_buckets-32-words17]"],
        "why": "histograms of another size are refused, not misread",
    },
    {
        "name": "tracefile-reader-block-fields-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "        if off % (4 if name in (\"tid\", \"state\") else 8) or end > bs:\n",
        "new": "        if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[off_hist-1073741824-words14]",
                  "tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[off_fn-8388608-words15]"],
        "why": "a block field outside the block is refused, never read from the next one",
    },
    {
        "name": "tracefile-reader-fine-table-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": ("    if (not 0 < fs <= 1 << 24 or fs & (fs - 1) or h[\"fine_sub_shift\"] != "
                "FINE_SUB_SHIFT\n"),
        "new": "    if (False\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[fine_sub_shift-5-words2]",
                  "tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[fine_slots-3000-words4]"],
        "why": "a fine table of another shape is refused, never read as this one",
    },
    {
        "name": "tracefile-reader-mode-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if h[\"mode\"] not in MODES:\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[mode-7-words18]"],
        "why": "an unknown trace mode is refused",
    },
    {
        "name": "tracefile-reader-state-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": "    if h[\"state\"] not in (RUNNING, COMPLETE):\n",
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[state-9-words19]"],
        "why": "an unknown state is refused, never read as complete or running",
    },
    {
        "name": "tracefile-reader-complete-without-an-end",
        "file": "shimgen/trace/binary.py",
        "old": ("    if h[\"state\"] == COMPLETE and (not h[\"end_ns\"] or h[\"end_ns\"] < "
                "h[\"start_ns\"]):\n"),
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[end_ns-0-words22]"],
        "why": "a file marked complete without an end time is refused",
    },
    {
        "name": "tracefile-reader-names-unchecked",
        "file": "shimgen/trace/binary.py",
        "old": ("    if names[-1] != b\"\" or len(names) != h[\"nfuncs\"] + 1 or not "
                "all(names[:-1]):\n"),
        "new": "    if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_names_and_error_slots_are_"
                  "refused",
                  "tests/report/test_tracefile_reader.py::test_corrupt_header_is_refused"
                  "[nfuncs-599-words9]"],
        "why": "a names table that does not hold exactly nfuncs names is refused",
    },
    {
        "name": "tracefile-reader-error-slot-function-unchecked",
        "file": "shimgen/trace/blocks.py",
        "old": "        if not 0 <= idx < nf:\n",
        "new": "        if False:\n",
        "tests": ["tests/report/test_tracefile_reader.py::test_corrupt_names_and_error_slots_are_"
                  "refused"],
        "why": "an error slot for a function the file does not have is refused",
    },
    {
        "name": "gates-unknown-name-taken",
        "file": "runtime/gates/gates.c",
        "old": "        if (i == plan->ngates) {\n",
        "new": "        if (0) {\n",
        "tests": ["tests/gates/test_gate_runtime.py::test_unknown_gate_name_is_refused"],
        "why": "a SHIMGEN_GATES naming a gate this shim lacks selects nothing and is refused",
    },
    {
        "name": "cache-key-blind-to-the-driver",
        "file": "shimgen/cache/store.py",
        "old": 'manifest.get("cache_key") != key.as_dict()',
        "new": ('{k: v for k, v in (manifest.get("cache_key") or {}).items() '
                'if k != "driver_build_id"} != {k: v for k, v in key.as_dict().items() '
                'if k != "driver_build_id"}'),
        "tests": ["tests/run/test_run_cache.py::test_an_entry_copied_under_another_drivers_key_is_"
                  "rebuilt_not_used"],
        "why": "an entry is used only for the driver its manifest names, whatever its "
               "directory is called",
    },
    {
        "name": "cache-entry-open-to-others-trusted",
        "file": "shimgen/files/owned.py",
        "old": "    if st.st_mode & 0o022:\n        return OPEN_TO_OTHERS\n",
        "new": "",
        "tests": ["tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_"
                  "never_loaded[open-to-others]",
                  "tests/run/test_cache_trust.py::test_an_entry_that_is_not_the_users_own_is_rebuilt_"
                  "never_loaded[library-open-to-others]"],
        "why": "an entry, or a file in it, that group or others can write is never loaded",
    },
    {
        "name": "cache-manifest-without-digest-trusted",
        "file": "shimgen/cache/store.py",
        "old": "        if not isinstance(digest, str):\n",
        "new": "        if False:\n",
        "tests": ["tests/run/test_cache_trust.py::test_an_entry_without_a_digest_is_rebuilt"],
        "why": "an entry whose manifest records no digest of the library is rebuilt",
    },
    # ---- shimgen diff: what a driver upgrade changes ----
    {
        "name": "diff-added-removed-swapped",
        "file": "shimgen/diff/compare.py",
        "old": "        return sorted(b - a)\n",
        "new": "        return sorted(a - b)\n",
        "tests": ["tests/diff/test_diff.py::test_exports_added_and_removed_are_nm_s"],
        "why": "added exports are NEW's less OLD's, as nm -D --defined-only lists them",
    },
    {
        "name": "diff-variant-move-missed",
        "file": "shimgen/diff/query.py",
        "old": "            if x == y:\n",
        "new": "            if x.found == y.found:\n",
        "tests": ["tests/diff/test_diff.py::test_proc_address_differences_are_the_drivers_own",
                  "tests/diff/test_diff.py::test_proc_address_names_a_variant_move"],
        "why": "a query that gives another export on NEW (_v2 -> _v3) is a difference",
    },
    {
        "name": "diff-bisection-off-by-one",
        "file": "shimgen/diff/query.c",
        "old": "        step(name, api, flags, b, at_b);\n",
        "new": "        step(name, api, flags, a, at_b);\n",
        "tests": ["tests/diff/test_diff.py::test_proc_address_differences_are_the_drivers_own"],
        "why": "each span starts at the first version the driver gives the new answer",
    },
    {
        "name": "diff-hook-variants-missed",
        "file": "shimgen/diff/compare.py",
        "old": "        gained = sorted(set(self.new_variants) - set(self.old_variants))\n",
        "new": "        gained = []\n",
        "tests": ["tests/diff/test_diff.py::test_hooks_that_vanish_or_gain_variants"],
        "why": "a hooked name that gains a variant on NEW is reported",
    },
    {
        "name": "diff-hook-comments-read",
        "file": "shimgen/diff/compare.py",
        "old": ("    code = _C_TOKENS.sub(lambda m: \" \" if m.group(0)[0] == \"/\" "
                "else '\"\"', text)\n"),
        "new": "    code = text\n",
        "tests": ["tests/diff/test_diff.py::test_hook_scanner_reads_the_names_outside_comments"],
        "why": "names in comments and strings of a hook file are not hooks",
    },
    {
        "name": "diff-exit-0-on-differences",
        "file": "shimgen/diff/compare.py",
        "old": "        return DIFFERENCES if self.differs() else NO_DIFFERENCES\n",
        "new": "        return NO_DIFFERENCES\n",
        "tests": ["tests/diff/test_diff.py::test_reversed_direction_swaps_added_and_removed"],
        "why": "exit 1 when the drivers differ, as diff(1)",
    },
    {
        "name": "diff-gate-offset-comparison-wrong",
        "file": "shimgen/diff/gates.py",
        "old": "        if o.fields != n.fields:\n",
        "new": "        if o.fields != o.fields:\n",
        "tests": ["tests/diff/test_diff.py::test_gates_are_each_drivers_profile"],
        "why": "a gate whose struct offset or bit moved is a difference",
    },
    {
        "name": "diff-gate-sides-mixed",
        "file": "shimgen/diff/gates.py",
        "old": "            g.name, tuple((f.offset, f.mask) for f in g.fields),\n",
        "new": "            g.name, tuple((f.mask, f.offset) for f in g.fields),\n",
        "tests": ["tests/diff/test_diff.py::test_gates_are_each_drivers_profile"],
        "why": "each side's offset and bit are the driver's own profile's",
    },
    {
        "name": "diff-trouble-exit-1",
        "file": "shimgen/diff/main.py",
        "old": "        return TROUBLE\n",
        "new": "        return 1\n",
        "tests": ["tests/diff/test_diff.py::test_bad_path_is_trouble"],
        "why": "trouble is exit 2 for diff, as diff(1), not shimgen's usual 1",
    },
    {
        "name": "diff-crash-not-said",
        "file": "shimgen/diff/query.py",
        "old": "        if rc != 0:\n",
        "new": "        if rc > 0:\n",
        "tests": ["tests/diff/test_diff.py::test_a_driver_that_crashes_its_process_is_trouble"],
        "why": "a driver that kills its query process is named as the cause",
    },
    # ---- diff and hooks as an attacker sees them: code that runs as the user ----
    {
        "name": "diff-querier-inherits-stdin",
        "file": "shimgen/diff/query.py",
        "old": "                stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.DEVNULL,\n",
        "new": "                stdout=write_end, stderr=subprocess.DEVNULL,\n",
        "tests": ["tests/diff/test_diff_hostile.py::test_the_querier_has_only_its_pipe"],
        "why": "the process that runs a driver's code for diff has stdin on /dev/null",
    },
    {
        "name": "diff-querier-inherits-stderr",
        "file": "shimgen/diff/query.py",
        "old": "                stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.DEVNULL,\n",
        "new": "                stdin=subprocess.DEVNULL, stdout=write_end,\n",
        "tests": ["tests/diff/test_diff_hostile.py::test_the_querier_has_only_its_pipe"],
        "why": "the querier's stderr is /dev/null: what a driver prints is not shimgen's",
    },
    {
        "name": "diff-querier-inherits-descriptors",
        "file": "shimgen/diff/query.py",
        "old": "                close_fds=True, start_new_session=True, env=child_env())\n",
        "new": "                close_fds=False, start_new_session=True, env=child_env())\n",
        "tests": ["tests/diff/test_diff_hostile.py::test_the_querier_has_only_its_pipe"],
        "why": "no descriptor of shimgen's reaches the driver's code but the answer pipe",
    },
    {
        "name": "diff-querier-group-not-killed",
        "file": "shimgen/diff/query.py",
        "old": "                os.killpg(self._proc.pid, signal.SIGKILL)\n",
        "new": "                os.kill(self._proc.pid, signal.SIGKILL)\n",
        "tests": ["tests/diff/test_diff_hostile.py::"
                  "test_what_the_driver_started_is_killed_and_does_not_stall_diff"],
        "why": "what a driver's code started is killed with the querier when diff is done",
    },
    {
        "name": "diff-querier-output-uncapped",
        "file": "shimgen/diff/query.py",
        "old": "                    if self._got > self.cap:\n",
        "new": "                    if False:\n",
        "tests": ["tests/diff/test_diff_hostile.py::test_a_flood_on_the_answer_pipe_is_capped"],
        "why": "the querier's output is read up to a cap set by the names, never held whole",
    },
    {
        "name": "diff-querier-steps-unbounded",
        "file": "shimgen/diff/query.c",
        "old": "    if (++steps_of_query > MAX_STEPS)\n",
        "new": "    if (++steps_of_query > MAX_STEPS * 100000)\n",
        "tests": ["tests/diff/test_diff_hostile.py::"
                  "test_answers_that_change_without_end_are_bounded"],
        "why": "the steps of one query are bounded, so the work is bounded by the names",
    },
    {
        "name": "diff-querier-versions-unbounded",
        "file": "shimgen/diff/query.c",
        "old": "        top = cuda > far - 10 ? far : cuda + 10;\n",
        "new": "        top = cuda + 10;\n",
        "tests": ["tests/diff/test_diff_hostile.py::"
                  "test_a_driver_version_far_out_bounds_the_versions_asked"],
        "why": "the versions asked stop at the far one, whatever version the driver says",
    },
    {
        "name": "diff-querier-hang-taken-for-an-exit",
        "file": "shimgen/diff/query.py",
        "old": "            if left <= 0 or self._over:\n                return False\n",
        "new": "            if left <= 0 or self._over:\n                return True\n",
        "tests": ["tests/diff/test_diff_hostile.py::"
                  "test_a_driver_that_hangs_is_stopped_and_said_truly"],
        "why": "a querier that did not exit in time is said as what was measured, and stopped",
    },
    {
        "name": "diff-driver-of-another-user-loaded",
        "file": "shimgen/diff/compare.py",
        "old": "        why = distrust_code(fd, image.real_path)\n",
        "new": "        why = \"\"\n",
        "tests": ["tests/diff/test_diff_hostile.py::"
                  "test_a_driver_another_user_could_change_is_refused_before_it_runs"],
        "why": "diff runs a driver's code only from a file that only the user or root can change",
    },
    {
        "name": "diff-shim-compared-as-a-driver",
        "file": "shimgen/diff/compare.py",
        "old": "    check_not_a_shim(image)\n",
        "new": "    pass\n",
        "tests": ["tests/diff/test_diff_hostile.py::test_a_shim_is_refused_as_either_driver"],
        "why": "diff refuses a shim as OLD or NEW, as build and run refuse it (exit 2)",
    },
    {
        "name": "diff-cached-querier-of-another-user-run",
        "file": "shimgen/diff/procaddr.py",
        "old": "            fd, _ = open_file(fds[-1], name)\n",
        "new": "            fd = os.open(name, os.O_RDONLY, dir_fd=fds[-1])\n",
        "tests": ["tests/diff/test_diff_hostile.py::"
                  "test_a_cached_querier_another_user_owns_is_never_run"],
        "why": "the cached querier in tools/ is run only when it is the user's own, as every "
               "cache file",
    },
    {
        "name": "diff-hook-declared-after-hooked-wins",
        "file": "shimgen/diff/compare.py",
        "old": ("        out[m.group(2)] = \"hook\" if \"hook\" in (kind, out.get(m.group(2))) "
                "else kind\n"),
        "new": "        out[m.group(2)] = kind\n",
        "tests": ["tests/diff/test_diff_hooks.py::test_a_name_hooked_and_declared_counts_as_hooked"
                  "[hooked-first]"],
        "why": "a name a hook file hooks and then declares counts as hooked",
    },
    {
        "name": "diff-hook-first-kind-wins",
        "file": "shimgen/diff/compare.py",
        "old": ("        out[m.group(2)] = \"hook\" if \"hook\" in (kind, out.get(m.group(2))) "
                "else kind\n"),
        "new": "        out.setdefault(m.group(2), kind)\n",
        "tests": ["tests/diff/test_diff_hooks.py::test_a_name_hooked_and_declared_counts_as_hooked"
                  "[declared-first]"],
        "why": "a name a hook file declares and then hooks counts as hooked",
    },
    {
        "name": "code-trust-file-owner-unchecked",
        "file": "shimgen/files/owned.py",
        "old": "    if st.st_uid not in (me, 0):\n        return f\"{ANOTHER_USER} (uid {st.st_uid})\"\n",
        "new": "    if False:\n        return f\"{ANOTHER_USER} (uid {st.st_uid})\"\n",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_a_hook_file_another_user_could_change_is_refused[file-of-another-user]",
                  "tests/diff/test_diff_hostile.py::"
                  "test_a_driver_another_user_could_change_is_refused_before_it_runs"
                  "[OLD-file-of-another-user]"],
        "why": "a hook file or a driver diff loads is refused when another user owns it",
    },
    {
        "name": "code-trust-file-mode-unchecked",
        "file": "shimgen/files/owned.py",
        "old": "    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):\n",
        "new": "    if st.st_mode & stat.S_IWOTH:\n",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_a_hook_file_another_user_could_change_is_refused[file-group-can-write]"],
        "why": "a hook file that group or others can write is refused",
    },
    {
        "name": "code-trust-directory-mode-unchecked",
        "file": "shimgen/files/owned.py",
        "old": "        if d.st_mode & 0o022 and not d.st_mode & stat.S_ISVTX:\n",
        "new": "        if False:\n",
        "tests": ["tests/run/test_userhooks_trust.py::test_a_hook_file_another_user_could_change_is_"
                  "refused[directory-others-can-write]",
                  "tests/run/test_userhooks_trust.py::"
                  "test_a_link_to_a_hook_file_in_a_shared_directory_is_refused",
                  "tests/diff/test_diff_hostile.py::test_a_driver_another_user_could_change_is_"
                  "refused_before_it_runs[NEW-directory-others-can-write]"],
        "why": "a file in a directory others can write (without the sticky bit) is refused",
    },
    {
        "name": "code-trust-sticky-refused",
        "file": "shimgen/files/owned.py",
        "old": "        if d.st_mode & 0o022 and not d.st_mode & stat.S_ISVTX:\n",
        "new": "        if d.st_mode & 0o022:\n",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_a_hook_file_of_the_users_own_in_a_sticky_directory_is_used",
                  "tests/diff/test_diff_hostile.py::"
                  "test_a_driver_in_a_sticky_shared_directory_is_used"],
        "why": "a sticky directory (others cannot rename or remove the user's file) is fine",
    },
    {
        "name": "code-trust-directory-owner-unchecked",
        "file": "shimgen/files/owned.py",
        "old": "        if d.st_uid not in (me, 0):\n",
        "new": "        if False:\n",
        "tests": ["tests/run/test_userhooks_trust.py::test_a_hook_file_another_user_could_change_is_"
                  "refused[directory-of-another-user]"],
        "why": "a file in a directory another user owns (who can swap it) is refused",
    },
    {
        "name": "userhooks-file-of-another-user-built",
        "file": "shimgen/shim/userhooks.py",
        "old": "        why = distrust_code(fd, path)\n",
        "new": "        why = \"\"\n",
        "tests": ["tests/run/test_userhooks_trust.py::test_a_hook_file_another_user_could_change_is_"
                  "refused"],
        "why": "a hook file another user could change is refused by build, run and diff",
    },
    {
        "name": "userhooks-control-character-in-path",
        "file": "shimgen/shim/userhooks.py",
        "old": "        check_path_text(path, \"hook file\")\n",
        "new": "",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_a_link_with_a_control_character_to_a_plain_hook_path_is_refused"],
        "why": "a hook path with a control character is refused in one line, shown escaped",
    },
    {
        "name": "userhooks-control-character-in-real-path",
        "file": "shimgen/shim/userhooks.py",
        "old": "        check_path_text(os.path.realpath(path), \"hook file\")\n",
        "new": "",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_a_link_to_a_hook_path_with_a_control_character_is_refused"],
        "why": "a link to a hook path with a control character is refused too",
    },
    {
        "name": "userhooks-over-the-limit-cut",
        "file": "shimgen/shim/userhooks.py",
        "old": "    if len(data) > MAX_BYTES:\n        raise",
        "new": "    data = data[:MAX_BYTES]\n    if False:\n        raise",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_a_hook_file_over_its_limit_is_refused_never_cut"],
        "why": "a hook file over its limit is refused, never cut (two would share a cached shim)",
    },
    {
        "name": "gates-profile-over-the-limit-cut",
        "file": "shimgen/gates/profile.py",
        "old": "        if len(data) > MAX_PROFILE_BYTES:\n",
        "new": "        if False:\n",
        "tests": ["tests/gates/test_profile_limit.py::"
                  "test_a_profile_one_byte_over_its_limit_is_refused_never_cut"],
        "why": "a gate profile over its limit is refused, never cut and used",
    },
    {
        "name": "userhooks-copy-more-readable",
        "file": "shimgen/shim/render.py",
        "old": "            write_private(path, user_source_text(hook.path, hook.data), hook.mode)\n",
        "new": "            path.write_bytes(user_source_text(hook.path, hook.data))\n",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_a_builds_copy_of_a_hook_file_is_never_more_readable"],
        "why": "a build's copy of a hook file is never more readable than the file",
    },
    {
        "name": "userhooks-say-before-config",
        "file": "runtime/hooks/userhooks.c",
        "old": "    shimgen_config();\n    char line[1024];\n",
        "new": "    char line[1024];\n",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_hook_say_writes_one_line_in_the_notice_file_from_a_constructor_too",
                  "tests/run/test_userhooks_trust.py::test_hook_say_is_silent_under_shimgen_quiet"],
        "why": "shimgen_hook_say from a hook's constructor goes where notices go, and keeps "
               "quiet under SHIMGEN_QUIET",
    },
    {
        "name": "userhooks-say-keeps-a-newline",
        "file": "runtime/hooks/userhooks.c",
        "old": "        if (line[k] == '\\n' || line[k] == '\\r')\n",
        "new": "        if (line[k] == '\\r')\n",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_hook_say_writes_one_line_in_the_notice_file_from_a_constructor_too"],
        "why": "a hook's notice with an LF is one line: it cannot forge a line of the shim's",
    },
    {
        "name": "userhooks-say-keeps-a-carriage-return",
        "file": "runtime/hooks/userhooks.c",
        "old": "        if (line[k] == '\\n' || line[k] == '\\r')\n",
        "new": "        if (line[k] == '\\n')\n",
        "tests": ["tests/run/test_userhooks_trust.py::"
                  "test_hook_say_writes_one_line_in_the_notice_file_from_a_constructor_too"],
        "why": "a hook's notice with a CR is one line: it cannot overwrite a line on a terminal",
    },
    {
        "name": "run-dir-swap-notice-by-path",
        "file": "runtime/base/say.c",
        "old": "    int at = shimgen_at_run_dir(shimgen_cfg.notice_file, &rel);\n",
        "new": "    int at = AT_FDCWD;\n    rel = shimgen_cfg.notice_file;\n",
        "tests": ["tests/run/test_run_safety.py::"
                  "test_a_program_started_after_the_run_directory_was_swapped_writes_nothing_there"],
        "why": "a program of the job never makes its notice file in a run directory put in "
               "place of its own",
    },
    {
        "name": "run-dir-swap-traces-by-path",
        "file": "runtime/tracefile/tracefile.c",
        "old": "    int at = shimgen_at_run_dir(dir, &rel);\n",
        "new": "    int at = AT_FDCWD;\n    rel = dir;\n",
        "tests": ["tests/run/test_run_safety.py::"
                  "test_a_program_started_after_the_run_directory_was_swapped_writes_nothing_there"],
        "why": "a program of the job never makes traces/ in a run directory put in place of its "
               "own",
    },
    {
        "name": "run-dir-swap-timeline-by-path",
        "file": "runtime/output/output.c",
        "old": "    int at = shimgen_at_run_dir(dir, &rel);\n",
        "new": "    int at = AT_FDCWD;\n    rel = dir;\n",
        "tests": ["tests/run/test_run_safety.py::"
                  "test_a_program_started_after_the_run_directory_was_swapped_writes_nothing_there"],
        "why": "a program of the job never writes its timeline in a run directory put in place "
               "of its own",
    },
    {
        "name": "run-dir-identity-not-passed",
        "file": "shimgen/run/main.py",
        "old": ("        env = child_environment(dict(os.environ), entry.library, run_dir.path, opts,\n"
                "                                (st.st_dev, st.st_ino), nvml_preload(opts, driver))\n"),
        "new": ("        env = child_environment(dict(os.environ), entry.library, run_dir.path, opts,\n"
                "                                None, nvml_preload(opts, driver))\n"),
        "tests": ["tests/run/test_run_safety.py::"
                  "test_a_program_started_after_the_run_directory_was_swapped_writes_nothing_there"],
        "why": "run tells the job's processes which run directory is theirs",
    },
    {
        "name": "diff-other-answers-not-a-difference",
        "file": "shimgen/diff/compare.py",
        "old": "or self.removed(\"data\") or self.spans or self.gates_differ()",
        "new": "or self.removed(\"data\") or self.gates_differ()",
        "tests": ["tests/diff/test_diff.py::test_equal_exports_with_other_answers_are_differences"],
        "why": "equal exports with other cuGetProcAddress answers: exit 1, differences true",
    },
    {
        "name": "diff-querier-answers-unchecked",
        "file": "shimgen/diff/query.py",
        "old": "            if any((name, api, flags) not in steps for api in present for flags in FLAGS):\n",
        "new": "            if False:\n",
        "tests": ["tests/diff/test_diff.py::test_a_querier_that_answers_wrongly_is_trouble[no-answers]",
                  "tests/diff/test_diff.py::test_a_querier_that_answers_wrongly_is_trouble[one-answer]"],
        "why": "a querier that left names unanswered is trouble, never \"no differences\"",
    },
    {
        "name": "diff-querier-silence-taken",
        "file": "shimgen/diff/query.py",
        "old": "    if not lines or not re.fullmatch(r\"v \\d+\", lines[0]):\n",
        "new": "    if False:\n",
        "tests": ["tests/diff/test_diff.py::test_a_querier_that_answers_wrongly_is_trouble[silent]"],
        "why": "a querier that said nothing is trouble in one line, not an internal error",
    },
    {
        "name": "diff-querier-line-unchecked",
        "file": "shimgen/diff/query.py",
        "old": "        if len(parts) != 8 or parts[0] != \"s\":\n",
        "new": "        if parts[0] != \"s\":\n",
        "tests": ["tests/diff/test_diff.py::test_a_querier_that_answers_wrongly_is_trouble[short-line]"],
        "why": "a line of the querier that is not a step is trouble in one line",
    },
    {
        "name": "diff-directory-without-a-driver-taken",
        "file": "shimgen/diff/compare.py",
        "old": "    if len(found) != 1:\n",
        "new": "    if len(found) > 1:\n",
        "tests": ["tests/diff/test_diff.py::test_bad_path_is_trouble"],
        "why": "a directory without libcuda.so.1 or one libcuda.so.<version> is trouble in one "
               "line",
    },
    # ---- fault injection (SHIMGEN_INJECT): the keys, matching, refusals, the record ----
    {
        "name": "inject-nth-off-by-one",
        "file": "runtime/hooks/inject.c",
        "old": "        return n == ru->v[K_NTH];\n",
        "new": "        return n + 1 == ru->v[K_NTH];\n",
        "tests": ["tests/runtime/test_inject.py::test_every_key[cuDriverGetVersion=2,nth=3-want1]"],
        "why": "nth=N fails the Nth matching call, counted from 1",
    },
    {
        "name": "inject-every-ignored",
        "file": "runtime/hooks/inject.c",
        "old": "    if (ru->has[K_EVERY] && n % ru->v[K_EVERY])\n",
        "new": "    if (0)\n",
        "tests": ["tests/runtime/test_inject.py::test_every_key[cuDriverGetVersion=2,every=3-want2]"],
        "why": "every=N fails calls N, 2N, ... only",
    },
    {
        "name": "inject-after-off-by-one",
        "file": "runtime/hooks/inject.c",
        "old": "    if (ru->has[K_AFTER] && n <= ru->v[K_AFTER])\n",
        "new": "    if (ru->has[K_AFTER] && n < ru->v[K_AFTER])\n",
        "tests": ["tests/runtime/test_inject.py::test_every_key[cuDriverGetVersion=2,after=5-want3]"],
        "why": "after=N spares the first N calls, all of them",
    },
    {
        "name": "inject-times-one-more",
        "file": "runtime/hooks/inject.c",
        "old": "        if (!ru->has[K_TIMES] || k < ru->v[K_TIMES])\n",
        "new": "        if (!ru->has[K_TIMES] || k <= ru->v[K_TIMES])\n",
        "tests": ["tests/runtime/test_inject.py::test_every_key[cuDriverGetVersion=2,times=2-want4]"],
        "why": "times=K injects at most K failures",
    },
    {
        "name": "inject-seed-ignored",
        "file": "runtime/hooks/inject.c",
        "old": "    uint64_t h = mix(mix(mix(ru->v[K_SEED]) ^ r) ^ n);\n",
        "new": "    uint64_t h = mix(mix(mix(0) ^ r) ^ n);\n",
        "tests": ["tests/runtime/test_inject.py::test_seed_decides_and_python_predicts"],
        "why": "p draws from the seed: another seed, other failing calls",
    },
    {
        "name": "inject-c-variant-not-stripped",
        "file": "runtime/hooks/inject_rules.c",
        "old": "        v[d - 2] = '\\0';\n        return fnmatch(p, v, 0) == 0;\n",
        "new": "        return 0;\n",
        "tests": ["tests/runtime/test_inject.py::test_c_and_python_agree"],
        "why": "the shim matches cuMemAlloc to cuMemAlloc_v2 too, as Python does",
    },
    {
        "name": "inject-python-variant-not-stripped",
        "file": "shimgen/shim/inject.py",
        "old": ("    bare = stem if sep and stem and digits.isascii() and digits.isdigit() "
                "else base\n"),
        "new": "    bare = base\n",
        "tests": ["tests/runtime/test_inject.py::test_variants_match_as_documented"],
        "why": "a name matches its _v<N> variants (what cuGetProcAddress hands out)",
    },
    {
        "name": "inject-reader-no-subtraction",
        "file": "shimgen/trace/blocks.py",
        "old": ("    if timed:  # the time path counted the injected failures among the "
                "returns too\n"),
        "new": "    if False:\n",
        "tests": ["tests/runtime/test_inject.py::test_trace_file_and_json_record_injected[time]"],
        "why": "the report's driver errors are the returns less the injected failures",
    },
    {
        "name": "inject-json-no-subtraction",
        "file": "runtime/stats/trace.c",
        "old": ("        uint64_t inj = injected ? 0 : error_count(key | "
                "SHIMGEN_TRACEFILE_ERR_INJECTED);\n"),
        "new": "        uint64_t inj = 0 * error_count(key);\n",
        "tests": ["tests/runtime/test_inject.py::test_trace_file_and_json_record_injected[time]"],
        "why": "the shim's JSON errors are the driver's own, injected ones apart",
    },
    {
        "name": "inject-c-refusal-ignored",
        "file": "runtime/hooks/inject.c",
        "old": "    if (err) {\n        char shown[",
        "new": "    if (0) {\n        char shown[",
        "tests": ["tests/runtime/test_inject.py::test_a_refused_spec_arms_nothing_and_says_so_once"],
        "why": "a bad rule arms nothing and says so once",
    },
    {
        "name": "inject-c-nth-combination-accepted",
        "file": "runtime/hooks/inject_rules.c",
        "old": "    if (r->has[K_NTH] && (r->has[K_EVERY]",
        "new": "    if (0 && (r->has[K_EVERY]",
        "tests": ["tests/runtime/test_inject.py::test_c_and_python_agree"],
        "why": "the shim refuses what Python refuses (nth with every, after, times, p)",
    },
    {
        "name": "inject-fork-keeps-counts",
        "file": "runtime/hooks/inject.c",
        "old": "        rules[r].calls = rules[r].injected = 0;\n",
        "new": "        continue;\n",
        "tests": ["tests/runtime/test_inject.py::test_a_forked_child_counts_afresh"],
        "why": "a forked child counts its calls afresh",
    },
    {
        "name": "inject-run-unchecked",
        "file": "shimgen/run/main.py",
        "old": "        inject.check(opts.inject, inject.exports_of(entry.directory), version_from_name(driver))\n",
        "new": "        pass\n",
        "tests": ["tests/runtime/test_inject.py::test_run_refuses_a_bad_rule_before_anything_runs"
                  "[no-match]"],
        "why": "run refuses a rule that matches no export before anything runs",
    },
    {
        "name": "inject-rank-rule-armed-without-a-rank",
        "file": "runtime/hooks/inject.c",
        "old": "        ru->other_rank = ru->has[K_RANK] && (!shimgen_cfg.rank[0] ||\n",
        "new": "        ru->other_rank = ru->has[K_RANK] && (0 ||\n",
        "tests": ["tests/runtime/test_inject.py::"
                  "test_a_rank_rule_fires_only_in_the_process_of_that_rank[no-rank]"],
        "why": "rank=0 fires only where a launcher says rank 0, never in a process with no rank",
    },
    {
        "name": "inject-c-zero-taken-where-the-least-is-one",
        "file": "runtime/hooks/inject_rules.c",
        "old": "        uint64_t low = k == K_AFTER || k == K_SEED || k == K_RANK ? 0 : 1;\n",
        "new": "        uint64_t low = k == K_NTH ? 1 : 0;\n",
        "tests": ["tests/runtime/test_inject.py::"
                  "test_the_shims_parser_refuses_a_zero_where_the_least_is_one[every]"],
        "why": "a hand-set every=0 (or times=0) is refused in the notice, not a SIGFPE at the "
               "first matching call",
    },
    {
        "name": "inject-c-result-past-a-curesult",
        "file": "runtime/hooks/inject_rules.c",
        "old": "        if (v < 1 || v > SHIMGEN_INJECT_RESULT_MAX)\n",
        "new": "        if (v < 1)\n",
        "tests": ["tests/runtime/test_inject.py::test_c_and_python_agree"],
        "why": "the shim refuses a result past 2147483647, as Python does (no negative code)",
    },
    {
        "name": "inject-c-33-rules-taken",
        "file": "runtime/hooks/inject.c",
        "old": "        if (nrules == MAX_RULES) {\n",
        "new": "        if (nrules == MAX_RULES + 1) {\n",
        "tests": ["tests/runtime/test_inject.py::test_the_shims_parser_takes_32_rules_and_refuses_33"],
        "why": "a 33rd rule is refused in the notice, never written past the shim's 32",
    },
    {
        "name": "inject-c-long-spec-cut-not-refused",
        "file": "runtime/hooks/inject.c",
        "old": "    int err = n >= MAX_LEN;\n",
        "new": "    int err = n > MAX_LEN;\n",
        "tests": ["tests/runtime/test_inject.py::"
                  "test_the_shims_parser_takes_4095_bytes_and_refuses_more"],
        "why": "a SHIMGEN_INJECT longer than 4095 bytes is refused whole, never cut and armed",
    },
    {
        "name": "inject-c-armed-notice-past-its-line",
        "file": "runtime/hooks/inject.c",
        "old": "    for (unsigned r = 0; r < nrules && o < sizeof line; r++)\n",
        "new": "    for (unsigned r = 0; r < nrules; r++)\n",
        "tests": ["tests/runtime/test_inject.py::test_the_shims_parser_takes_32_rules_and_refuses_33"],
        "why": "the armed notice of 32 long rules is cut to its line, never written past it",
    },
    {
        "name": "inject-stub-decides-before-saving-the-arguments",
        "file": "runtime/arch/x86_64/stubs.S",
        "old": ("        save_argument_registers\n        mov     %r11, 192(%rsp)\n"
                "        mov     %r11d, %edi\n        call    shimgen_inject_decide\n"),
        "new": ("        push    %r11\n        mov     %r11d, %edi\n"
                "        call    shimgen_inject_decide\n        pop     %r11\n"
                "        save_argument_registers\n        mov     %r11, 192(%rsp)\n"),
        "tests": ["tests/runtime/test_timing.py::test_shim_preserves_arguments_and_results[inject]"],
        "why": "a call the injection lets through reaches the function with every argument "
               "register (integer and floating point) as the caller left it",
    },
    {
        "name": "inject-run-spec-length-unchecked",
        "file": "shimgen/shim/inject.py",
        "old": "    if len(spec.encode()) >= MAX_LEN:\n",
        "new": "    if len(spec.encode()) > MAX_LEN:\n",
        "tests": ["tests/runtime/test_inject.py::"
                  "test_the_shims_parser_takes_4095_bytes_and_refuses_more"],
        "why": "run refuses rules of 4096 bytes or more, which the shim would refuse at the load",
    },
    {
        "name": "inject-later-rule-overrides-the-first",
        "file": "runtime/hooks/inject.c",
        "old": "        if (code || !fires(ru, r, n))\n",
        "new": "        if (!fires(ru, r, n))\n",
        "tests": ["tests/runtime/test_inject.py::test_every_key"
                  "[cuDriverGetVersion=2,nth=2;cuDriverGetVersion=3,every=2-want12]"],
        "why": "the first rule that fires gives the code; a later one neither overrides it nor "
               "uses up its times",
    },
    {
        "name": "inject-record-without-a-block",
        "file": "runtime/hooks/inject.c",
        "old": "    if (s)\n        shimgen_block_add_error(s, key, 1);\n",
        "new": "    if (s || !s)\n        shimgen_block_add_error(s, key, 1);\n",
        "tests": ["tests/runtime/test_inject.py::test_every_key[cuDriverGetVersion=2-want0]"],
        "why": "an injected failure in an untraced process (no block) is returned, not recorded",
    },
    {
        "name": "inject-run-takes-one-rule-too-many",
        "file": "shimgen/shim/inject.py",
        "old": "    if len(rules) > MAX_RULES:\n",
        "new": "    if len(rules) > MAX_RULES + 1:\n",
        "tests": ["tests/runtime/test_inject.py::"
                  "test_run_refuses_more_rules_than_the_shim_takes_before_the_command_starts"],
        "why": "run refuses 33 rules before the command starts (the shim would arm none)",
    },
    # ---- user hooks (shimgen/shim/userhooks.py, runtime/hooks/userhooks.c, examples/hooks/) ----
    {
        "name": "userhooks-procaddr-answer-bypasses-hook",
        "file": "runtime/load/hooks_proc_address.c",
        "old": ("    shimgen_CUresult rc = real(symbol, pfn, version, flags, status);\n"
                "    if (rc == SHIMGEN_CUDA_SUCCESS)\n"
                "        swap_answer(pfn);\n"),
        "new": "    shimgen_CUresult rc = real(symbol, pfn, version, flags, status);\n",
        "tests": ["tests/run/test_userhooks.py::test_hook_reached_by_every_route[555.58.02]",
                  "tests/run/test_userhooks.py::test_memlimit_accounts_and_refuses[procaddr]"],
        "why": "every address cuGetProcAddress_v2 hands out for a hooked export reaches the hook",
    },
    {
        "name": "userhooks-exports-unchecked-at-the-line",
        "file": "shimgen/shim/userhooks.py",
        "old": ('"-fvisibility=hidden",\n'
                '          "-DSHIMGEN_CHECK_EXPORTS")\n'),
        "new": '"-fvisibility=hidden")\n',
        "tests": ["tests/run/test_userhooks.py::test_refused_with_the_users_file_and_line[unexported]"],
        "why": "a hook of a name the driver does not export is refused at the user's file and "
               "line (the exports header's check, in the compile before the build)",
    },
    {
        "name": "userhooks-cache-key-by-path-not-content",
        "file": "shimgen/shim/userhooks.py",
        "old": '    return _sha256("\\n".join(f.sha256 for f in files).encode())\n',
        "new": '    return _sha256("\\n".join(str(f.path) for f in files).encode())\n',
        "tests": ["tests/run/test_userhooks.py::test_run_rebuilds_when_the_hook_file_changes"],
        "why": "the cached shim of `shimgen run --hook` is keyed by the hook file's contents: "
               "a changed file is a rebuild",
    },
    {
        "name": "userhooks-real-skips-shimgens-own-hook",
        "file": "runtime/hooks/userhooks.c",
        "old": "        void *next = __atomic_load_n(&shimgen_targets[i], __ATOMIC_ACQUIRE);\n",
        "new": "        void *next = shimgen_real[i];\n",
        "tests": ["tests/run/test_userhooks.py::test_chain_keeps_shimgens_own_hook"],
        "why": "SHIMGEN_REAL reaches shimgen's own hook where it has one (gates, overrides "
               "keep working under a user hook)",
    },
    {
        "name": "userhooks-hook-in-front-of-a-missing-function",
        "file": "runtime/hooks/userhooks.c",
        "old": ("        if (loaded && shimgen_user_hook_fns[i] && shimgen_real[i] != "
                "(void *)shimgen_fail_missing)\n"),
        "new": "        if (loaded && shimgen_user_hook_fns[i])\n",
        "tests": ["tests/run/test_userhooks.py::"
                  "test_a_hook_of_a_function_the_loaded_driver_lacks_never_runs"],
        "why": "a call of a function the loaded driver lacks fails as without the hook, "
               "whatever the hook would answer",
    },
    {
        "name": "userhooks-hook-in-front-of-a-driver-that-failed-to-load",
        "file": "runtime/hooks/userhooks.c",
        "old": ("        if (loaded && shimgen_user_hook_fns[i] && shimgen_real[i] != "
                "(void *)shimgen_fail_missing)\n"),
        "new": ("        if (loaded >= 0 && shimgen_user_hook_fns[i] && shimgen_real[i] != "
                "(void *)shimgen_fail_missing)\n"),
        "tests": ["tests/run/test_userhooks.py::"
                  "test_a_hook_of_a_function_the_loaded_driver_lacks_never_runs"],
        "why": "with no driver loaded, every call fails as without hooks (303)",
    },
    {
        "name": "userhooks-shimgens-own-hook-taken",
        "file": "shimgen/shim/userhooks.py",
        "old": "        if name in model.unwrappable:\n",
        "new": "        if name in model.unwrappable and False:\n",
        "tests": ["tests/run/test_userhooks.py::test_refused_with_the_users_file_and_line[raw_procaddr]"],
        "why": "cuGetProcAddress(_v2) stays shimgen's: no user hook takes it, macros or not",
    },
    {
        "name": "userhooks-file-without-a-hook-built",
        "file": "shimgen/shim/userhooks.py",
        "old": "    if not hooks:\n",
        "new": "    if not hooks and False:\n",
        "tests": ["tests/run/test_userhooks.py::test_refused_with_the_users_file_and_line[no_hook]"],
        "why": "a hook file that defines no hook is refused",
    },
    {
        "name": "userhooks-file-given-twice-taken",
        "file": "shimgen/shim/userhooks.py",
        "old": "        if any(f.path == path for f in files):\n",
        "new": "        if any(f.path == path for f in files[1:]):\n",
        "tests": ["tests/run/test_userhooks.py::test_hook_paths_refused_in_one_line_before_any_work[twice]"],
        "why": "a hook file given twice is refused in one line",
    },
    {
        "name": "userhooks-not-a-c-file-taken",
        "file": "shimgen/shim/userhooks.py",
        "old": "        if path.suffix != \".c\":\n",
        "new": "        if path.suffix not in (\".c\", \".h\"):\n",
        "tests": ["tests/run/test_userhooks.py::test_hook_paths_refused_in_one_line_before_any_work[not-c]"],
        "why": "a hook file is a C file (FILE.c)",
    },
    {
        "name": "hook-file-of-any-kind-read",
        "file": "shimgen/files/reading.py",
        "old": "        if not stat.S_ISREG(mode):\n",
        "new": "        if stat.S_ISCHR(mode):\n",
        "tests": ["tests/run/test_userhooks.py::test_hook_paths_refused_in_one_line_before_any_work[directory]"],
        "why": "a file the user names is a regular file, refused in one line otherwise",
    },
    {
        "name": "userhooks-real-before-the-load-reaches-the-hook",
        "file": "runtime/arch/x86_64/asm.h",
        "old": "1:      mov     $\\idx, %r11d\n        jmp     shimgen_user_real_common\n",
        "new": "1:      jmp     *shimgen_slots+8*\\idx(%rip)\n",
        "tests": ["tests/run/test_userhooks.py::test_a_hook_of_a_function_the_loaded_driver_lacks_never_runs"],
        "why": "SHIMGEN_REAL from a hook file's constructor, before the driver is loaded, reaches "
               "the function behind the hook, never the hook",
    },
    {
        "name": "notice-past-its-buffer",
        "file": "runtime/base/say.c",
        "old": "        if ((size_t)n >= sizeof buf) { /* cut short: still one line */\n",
        "new": "        if ((size_t)n > 4 * sizeof buf) { /* cut short: still one line */\n",
        "tests": ["tests/run/test_userhooks.py::test_a_hooks_notice_is_one_line_cut_to_its_size"],
        "why": "a notice longer than 1023 bytes is cut to one line, never written past its buffer",
    },
    {
        "name": "memlimit-free-not-credited",
        "file": "examples/hooks/memlimit.c",
        "old": "        erase(s);\n        used -= size;\n",
        "new": "        erase(s);\n",
        "tests": ["tests/run/test_userhooks.py::test_memlimit_accounts_and_refuses[dlsym]",
                  "tests/run/test_userhooks.py::test_memlimit_table_as_a_unit"],
        "why": "memlimit.c gives back what cuMemFree_v2, cuMemFreeAsync and cuMemRelease free",
    },
    {
        "name": "memlimit-erase-leaves-a-hole",
        "file": "examples/hooks/memlimit.c",
        "old": "        if (i < j ? (h <= i || h > j) : (h <= i && h > j)) {\n",
        "new": "        if (h > SLOTS) {\n",
        "tests": ["tests/run/test_userhooks.py::test_memlimit_table_as_a_unit"],
        "why": "a freed slot never hides the allocations after it in the table",
    },
    # ---- the mixed-generation P2P gate (gates/p2p.py): found, changed and proven per build ----
    {
        "name": "p2p-finder-takes-one-struct",
        "file": "shimgen/gates/p2p.py",
        "old": "two is not None and two[1] == one[1] and two[0] != one[0]:",
        "new": "two is not None and two[1] == one[1]:",
        "tests": ["tests/gates/test_p2p_gate.py::"
                  "test_the_finder_wants_two_structs_one_field_and_a_branch_on_it"],
        "why": "a P2P check compares the field of two device structs, not one struct's twice",
    },
    {
        "name": "p2p-je32-jumps-elsewhere",
        "file": "shimgen/gates/p2p.py",
        "old": 'new = b"\\x90\\xe9" + raw[2:]',
        "new": 'new = b"\\xe9" + raw[2:] + b"\\x90"',
        "tests": ["tests/gates/test_p2p_gate.py::test_the_change_always_takes_the_equal_side"],
        "why": "je rel32 becomes nop; jmp rel32 to the same target (90 e9), as on 580.159.04",
    },
    {
        "name": "p2p-proof-ignores-the-drivers-answer",
        "file": "shimgen/gates/p2p_prove.py",
        "old": "ok = ok and got.split(\" (\")[0] == expect",
        "new": "ok = ok and (not patched or got.split(\" (\")[0] == expect)",
        "tests": ["tests/gates/test_p2p_gate.py::"
                  "test_the_proof_fails_a_branch_changed_the_wrong_way"],
        "why": "the proof needs the driver's own bytes to refuse different fields and accept "
               "equal ones, or it proves nothing about the field",
    },
    {
        "name": "p2p-profile-proof-taken-on-trust",
        "file": "shimgen/gates/plan.py",
        "old": 'if source != "auto" and p2p_proof is not None and profile.p2p.status == "found":',
        "new": "if False:",
        "tests": ["tests/gates/test_p2p_gate.py::"
                  "test_gates_json_has_the_p2p_gate_and_a_changed_byte_is_proven_again"],
        "why": "a profile file's P2P branch bytes are proven again before a shim bakes them",
    },
    {
        "name": "p2p-struct-method-says-in-effect",
        "file": "runtime/gates/gates.c",
        "old": "    if (method != SHIMGEN_GATE_METHOD_INIT_ALL &&\n        !struct_possible(method == SHIMGEN_GATE_METHOD_INIT, why, sizeof why)) {\n",
        "new": "    if (0) {\n",
        "tests": ["tests/gates/test_p2p_gate.py::"
                  "test_shim_changes_the_branches_in_memory_with_the_init_method_only"],
        "why": "SHIMGEN_GATES=p2p-mixed without the init method is refused, not said to be in "
               "effect while nothing is written",
    },
    {
        "name": "p2p-plan-branch-bytes-unchecked",
        "file": "shimgen/gates/plan.py",
        "old": "        refs += profile.p2p.insns()\n",
        "new": "        pass\n",
        "tests": ["tests/gates/test_p2p_gate.py::"
                  "test_gates_json_has_the_p2p_gate_and_a_changed_byte_is_proven_again"],
        "why": "the shim compares each P2P check's loads, compare and branch with the loaded "
               "driver before it changes a branch byte",
    },
    {
        "name": "build-kernels-hooks-listed-one-by-one",
        "file": "shimgen/shim/pipeline.py",
        "old": "    kernels = {f.name for f in model.hooked} & {name for name, _ in KERNEL_HOOKS}\n",
        "new": "    kernels = set()\n",
        "tests": ["tests/devtools/test_readme.py::test_the_try_it_commands_run_as_written_and_print_what_the_readme_shows"],
        "why": "the build's summary counts the kernels' hooks as it counts the memory routes, as the README shows",
    },
    {
        "name": "gates-verdict-count-leaves-p2p-out",
        "file": "shimgen/gates/report.py",
        "old": "    lines += [\"\", f\"{len(listed)} gate",
        "new": "    lines += [\"\", f\"{len(profile.gates)} gate",
        "tests": ["tests/gates/test_gates_verdict.py::test_the_count_is_the_gates_listed_and_diff_counts_the_same"],
        "why": "`shimgen gates` counts every gate it lists, the P2P gate too",
    },
    {
        "name": "gates-verdict-name-column-fixed",
        "file": "shimgen/gates/report.py",
        "old": "    w = max(9, 2 + max(map(len, listed)))",
        "new": "    w = 9",
        "tests": ["tests/gates/test_gates_verdict.py::test_the_count_is_the_gates_listed_and_diff_counts_the_same"],
        "why": "a gate's name never runs into its description: the column fits the longest",
    },
    {
        "name": "gates-next-leaves-p2p-out",
        "file": "shimgen/gates/report.py",
        "old": "    if p2p is not None:\n        lines += [f\"  a copy of the driver whose",
        "new": "    if False:\n        lines += [f\"  a copy of the driver whose",
        "tests": ["tests/gates/test_gates_verdict.py::test_the_verdict_first_and_short",
                  "tests/devtools/test_readme.py::"
                  "test_the_try_it_commands_run_as_written_and_print_what_the_readme_shows"],
        "why": "the verdict's next steps show how to use every gate it lists, p2p-mixed too",
    },
    {
        "name": "diff-gates-count-leaves-p2p-out",
        "file": "shimgen/diff/gates.py",
        "old": "        [profile.p2p.name] if profile.p2p is not None and profile.p2p.status == \"found\" else [])",
        "new": "        [])",
        "tests": ["tests/gates/test_gates_verdict.py::test_the_count_is_the_gates_listed_and_diff_counts_the_same"],
        "why": "`shimgen diff` counts and names the gates `shimgen gates` lists",
    },
    {
        "name": "p2p-jne-equal-side-taken-as-its-target",
        "file": "shimgen/gates/p2p.py",
        "old": "        equal = target if b.mnemonic == \"je\" else b.address + b.size\n",
        "new": "        equal = target\n",
        "tests": ["tests/gates/test_p2p_gate.py::test_a_jne_check_has_its_equal_side_after_the_branch"],
        "why": "a jne check's equal side is the instruction after it; the proof checks that side",
    },
    {
        "name": "p2p-any-short-branch-made-a-no-op",
        "file": "shimgen/gates/p2p.py",
        "old": "    elif raw[:1] == _JNE8 and len(raw) == 2:\n",
        "new": "    elif raw[:1] == _JNE8 or len(raw) == 2:\n",
        "tests": ["tests/gates/test_p2p_gate.py::test_a_branch_of_another_form_is_not_changed"],
        "why": "only a je or jne of a known form is changed; any other branch is left as it is",
    },
    {
        "name": "patch-output-dir-group-writable-taken",
        "file": "shimgen/gates/patch.py",
        "old": "    if st.st_uid != os.getuid() or st.st_mode & 0o022:\n",
        "new": "    if st.st_uid != os.getuid() or st.st_mode & 0o002:\n",
        "tests": ["tests/gates/test_initsite.py::test_patch_refuses_an_output_that_is_not_its_own_directory"],
        "why": "patch -o writes only into a directory neither group nor others can write",
   },
    # ---- every driver Debian ships: hooks of newer functions, older drivers, the matrix ----
    {
        "name": "hook-since-includes-its-own-version",
        "file": "shimgen/shim/model.py",
        "old": "cuda is not None and cuda < hook.since",
        "new": "cuda is not None and cuda <= hook.since",
        "tests": ["tests/pipeline/test_matrix.py::test_a_hook_is_absent_only_from_a_driver_older_than_its_function"],
        "why": "a hook is left out only of a driver older than the CUDA version that added its "
               "function; one that version carries must export it",
    },
    {
        "name": "hook-since-unknown-version-leaves-it-out",
        "file": "shimgen/shim/model.py",
        "old": "cuda is not None and cuda < hook.since",
        "new": "(cuda is None or cuda < hook.since)",
        "tests": ["tests/pipeline/test_matrix.py::test_a_hook_is_absent_only_from_a_driver_older_than_its_function"],
        "why": "a driver whose CUDA version is unknown gets no hook silently left out",
    },
    {
        "name": "hook-since-any-missing-name-left-out",
        "file": "shimgen/shim/model.py",
        "old": "            if driver_predates(driver, hook):\n",
        "new": "            if hook.since:\n",
        "tests": ["tests/pipeline/test_matrix.py::test_a_misspelt_hook_fails_on_a_driver_new_enough"],
        "why": "a misspelt hook name fails generation even when the hook has a CUDA version",
    },
    {
        "name": "predates-said-of-any-library",
        "file": "shimgen/driver/library.py",
        "old": "    if missing == [\"cuGetProcAddress\"]:\n",
        "new": "    if \"cuGetProcAddress\" in missing:\n",
        "tests": ["tests/pipeline/test_units.py::test_bad_driver_input_is_one_line"],
        "why": "only a CUDA driver (cuInit, cuDriverGetVersion) is said to predate "
               "cuGetProcAddress; another library is said to be what it is",
    },
    {
        "name": "cuda-of-driver-skips-the-first-of-a-branch",
        "file": "shimgen/cudaversions.py",
        "old": "and first <= branch]",
        "new": "and first < branch]",
        "tests": ["tests/pipeline/test_matrix.py::test_the_cuda_version_of_every_driver_is_what_it_reports"],
        "why": "the CUDA version said of a driver is the one its cuDriverGetVersion reports",
    },
    {
        "name": "gates-lacking-attributes-unsaid",
        "file": "shimgen/gates/report.py",
        "old": "lacking = [a for a in GATE_ATTRIBUTES if a > r.last_attribute]",
        "new": "lacking = [a for a in GATE_ATTRIBUTES if a > r.last_attribute + 10]",
        "tests": ["tests/pipeline/test_matrix.py::test_gates_says_what_an_older_driver_lacks"],
        "why": "`shimgen gates` says which gated attributes (124 before CUDA 11.7) a driver lacks",
    },
    {
        "name": "procaddr-v1-answer-not-mapped",
        "file": "runtime/load/hooks_proc_address.c",
        "old": ("    shimgen_CUresult rc = real(symbol, pfn, version, flags);\n"
                "    if (rc == SHIMGEN_CUDA_SUCCESS)\n"),
        "new": ("    shimgen_CUresult rc = real(symbol, pfn, version, flags);\n"
                "    if (rc == SHIMGEN_CUDA_SUCCESS && 0)\n"),
        "tests": ["tests/runtime/test_shim.py::test_every_route_lands_in_the_shim[470.256.02]",
                  "tests/run/test_cuda11_driver.py::test_cuda_11_runtime_fills_its_driver_table_through_the_shim"],
        "why": "on a driver with only the first cuGetProcAddress (470) its answers are the "
               "shim's trampolines",
    },
    {
        "name": "diff-compares-an-api-one-driver-lacks",
        "file": "shimgen/diff/query.py",
        "old": "    for key in sorted(k for k in set(old) | set(new) if k[1] in both):\n",
        "new": "    for key in sorted(set(old) | set(new)):\n",
        "tests": ["tests/run/test_cuda11_driver.py::test_diff_against_cuda_12_says_what_470_has_not"],
        "why": "diff compares the cuGetProcAddress APIs both drivers have (470 has no _v2) and "
               "says which one a driver lacks",
    },
    {
        "name": "newer-function-unsaid",
        "file": "shimgen/cudaversions.py",
        "old": "    if not since or cuda is None or cuda >= since:\n",
        "new": "    if not since or cuda is None or cuda >= 0:\n",
        "tests": ["tests/run/test_cuda11_driver.py::test_inject_names_what_the_driver_is_too_old_for"],
        "why": "--inject and --hook say when the function is newer than the driver",
    },
    {
        "name": "newer-gate-attribute-unsaid",
        "file": "shimgen/gates/facts.py",
        "old": "    if rule is None or cuda is None or cuda >= since:\n",
        "new": "    if rule is None or cuda is None or cuda >= 0:\n",
        "tests": ["tests/run/test_cuda11_driver.py::test_gates_selection_names_the_attribute_the_driver_lacks"],
        "why": "run --gates, patch and diff say when a gate's attribute is newer than the driver",
    },
    {
        "name": "driver-version-only-from-the-file-name",
        "file": "shimgen/driver/library.py",
        "old": "    m = _PROFILES_FILE.search(image.contents)\n",
        "new": "    m = None\n",
        "tests": ["tests/pipeline/test_matrix.py::test_a_driver_copied_under_another_name_is_told_by_its_contents"],
        "why": "a driver copied as libcuda.so.1 is still told by its version (its contents'): "
               "470's shim builds, 418 is refused naming its CUDA version",
    },
    # ---- the trace writer's totals (runtime/stats/totals.c) and output names (runtime/output/output_name.c) ----
    {
        "name": "totals-max-not-folded",
        "file": "runtime/stats/totals.c",
        "old": "    while (v > m && !__atomic_compare_exchange_n(total, &m, v, 1, __ATOMIC_RELAXED,\n",
        "new": "    while (0 && v > m && !__atomic_compare_exchange_n(total, &m, v, 1, __ATOMIC_RELAXED,\n",
        "tests": ["tests/runtime/test_timing.py::test_shim_preserves_arguments_and_results[time]"],
        "why": "each thread's maximum is folded into the process's (max_ns)",
    },
    {
        "name": "totals-fine-keys-of-other-functions-folded",
        "file": "runtime/stats/totals.c",
        "old": "            if (fine_key_fn(key) == i + 1 && n) {\n",
        "new": "            if (fine_key_fn(key) == i + 2 && n) {\n",
        "tests": ["tests/runtime/test_errors.py::test_histogram_bucket_of_a_call_of_known_length[time]"],
        "why": "a block's fine slots are folded for their own function only, each once",
    },
    {
        "name": "totals-block-calls-not-cleared",
        "file": "runtime/stats/totals.c",
        "old": '#define CLEAR_CALLS(fs, word) (fs).word = 0;\n',
        "new": '#define CLEAR_CALLS(fs, word)\n',
        "tests": ["tests/runtime/test_errors.py::test_blocks_reused_by_later_threads_fold_and_clear"],
        "why": "a block reused by a later thread starts with no calls (else they are folded twice)",
    },
    {
        "name": "totals-untimed-not-folded",
        "file": "runtime/stats/totals.c",
        "old": "    __atomic_fetch_add(&shimgen_untimed_calls, s->untimed, __ATOMIC_RELAXED);\n",
        "new": "",
        "tests": ["tests/runtime/test_timing.py::test_shim_preserves_arguments_and_results[time]"],
        "why": "the calls a full shadow stack left untimed are folded into the process's count",
    },
    {
        "name": "totals-block-overflow-not-folded",
        "file": "runtime/stats/totals.c",
        "old": "    __atomic_fetch_add(&shimgen_error_overflow, s->err_overflow, __ATOMIC_RELAXED);\n",
        "new": "",
        "tests": ["tests/runtime/test_errors.py::test_more_codes_than_slots_go_to_the_overflow"],
        "why": "a thread's error overflow is folded into the process's",
    },
    {
        "name": "output-name-cut-short",
        "file": "runtime/output/output_name.c",
        "old": "        if (o + n >= cap)\n            return -1;\n",
        "new": "        if (o + n >= cap)\n            n = cap - 1 - o;\n",
        "tests": ["tests/runtime/test_faults_output.py::test_name_too_long_once_expanded_is_refused"],
        "why": "a name that does not fit with %p, %r or .<pid> is refused, never cut short",
    },
    {
        "name": "output-name-shared-without-room-for-the-pid",
        "file": "runtime/output/output_name.c",
        "old": "            if (!shimgen_shared_name(pattern))\n                break;\n",
        "new": "            break;\n",
        "tests": ["tests/runtime/test_faults_output.py::test_a_shared_name_without_room_for_its_pid_is_refused"],
        "why": "a shared name must fit with the .<pid> another process of the job may add",
    },
    {
        "name": "output-name-rankless-process-gets-rank-0",
        "file": "runtime/output/output_name.c",
        "old": "                snprintf(piece, sizeof piece, \"p%ld\", pid);\n",
        "new": "                snprintf(piece, sizeof piece, \"0\");\n",
        "tests": ["tests/runtime/test_shim.py::test_rank_in_trace_file_name"],
        "why": "%r in a process without a rank is p<pid>, never another rank's name",
    },
    {
        "name": "totals-child-keeps-the-parents-errors",
        "file": "runtime/stats/totals.c",
        "old": "    memset(shimgen_errors, 0, sizeof shimgen_errors);\n",
        "new": "",
        "tests": ["tests/runtime/test_errors.py::test_a_forked_child_reports_only_its_own_errors"],
        "why": "a forked child's errors are its own, not those its parent's exited threads folded",
    },
    # ---- the command line's interrupt: one line, the last ----
    {
        "name": "cli-second-interrupt-escapes-the-saying",
        "file": "shimgen/cli.py",
        "old": ("        except KeyboardInterrupt:  # the second, before the first's line: the first "
                "is said\n            continue\n"),
        "new": "        except ValueError:\n            continue\n",
        "tests": ["tests/cli/test_cli_start.py::test_a_second_interrupt_while_the_line_is_written_is_dropped"],
        "why": "a second interrupt while the first's line is said leaves that line, once",
    },
    {
        "name": "cli-interrupt-after-the-line-raised",
        "file": "shimgen/errors.py",
        "old": "    if said:\n        return\n",
        "new": "",
        "tests": ["tests/cli/test_cli_start.py::test_a_second_interrupt_while_the_line_is_written_is_dropped"],
        "why": "an interrupt that comes once the line is being said is dropped, not raised",
    },
    {
        "name": "interrupt-after-the-guard-redelivered",
        "file": "shimgen/errors.py",
        "old": "        if sys.is_finalizing() or _ended:\n",
        "new": "        if sys.is_finalizing():\n",
        "tests": ["tests/cli/test_cli_inputs.py::test_an_interrupt_python_ignores_after_the_guard_"
                  "ended_is_dropped"],
        "why": "an interrupt Python ignores after the start's guard ended is dropped: a timer "
               "set then fires outside every guard (a traceback, or death by SIGALRM)",
    },
    {
        "name": "main-second-interrupt-said-as-the-end",
        "file": "shimgen/__main__.py",
        "old": "        if first is not e:\n",
        "new": "        if False:\n",
        "tests": ["tests/cli/test_cli_start.py::test_a_second_interrupt_as_the_first_is_said_leaves_the_first_said"],
        "why": "an interrupt that escaped while an earlier one was being said: the earlier one's "
               "line, never \"as shimgen ended\"",
    },
    {
        "name": "main-last-flush-outside-the-guard",
        "file": "shimgen/__main__.py",
        "old": ("            finally:  # what the command wrote (argparse's --help too), out inside "
                "the guard\n                _flush_stdout()\n"),
        "new": ("            finally:  # what the command wrote (argparse's --help too), out inside "
                "the guard\n                pass\n"),
        "tests": ["tests/cli/test_cli_start.py::test_an_interrupt_in_the_last_flush_is_said_never_lost"],
        "why": "an interrupt as the command's output is flushed is said, never lost with it",
    },
    {
        "name": "cli-interrupt-then-a-del-traceback",
        "file": "shimgen/cli.py",
        "old": "            sys.unraisablehook = quiet_unraisable\n            say(e.message(command))\n",
        "new": "            say(e.message(command))\n",
        "tests": ["tests/cli/test_cli_start.py::"
                  "test_an_interrupt_is_the_last_word_not_a_half_made_objects_del"],
        "why": "after the interrupt's line nothing more is said (a half-made object's __del__)",
    },
    {
        "name": "arm64-count-stub-counts-nothing",
        "file": "runtime/arch/aarch64/stubs.S",
        "old": "        ldr     x9, [x16, #(TS_COUNT + TS_FSTATS_SIZE * \\i)]\n        add     x9, x9, #1\n",
        "new": "        ldr     x9, [x16, #(TS_COUNT + TS_FSTATS_SIZE * \\i)]\n        add     x9, x9, #0\n",
        "tests": ["tests/runtime/test_aarch64.py::test_the_shim_forwards_every_route_and_counts_under_qemu"],
        "why": "an aarch64 shim counts every call of a thread whose counters exist",
    },
    {
        "name": "arm64-cleared-block-loses-its-targets",
        "file": "runtime/stats/totals.c",
        "old": '#define CLEAR_NONE(fs, word)\n',
        "new": '#define CLEAR_NONE(fs, word) (fs).word = 0;\n',
        "tests": ["tests/runtime/test_aarch64.py::test_threads_calling_while_the_exit_folds_"
                  "their_blocks_go_on"],
        "why": "an aarch64 block cleared at exit keeps the targets its thread, still calling, "
               "branches through",
    },
    {
        "name": "arm64-timed-call-keeps-the-frame-in-x19",
        "file": "runtime/arch/aarch64/timing.S",
        "old": "        ldp     x12, x19, [x9, #FRAME_IDX]          /* i, the caller's x19 */\n",
        "new": "        ldr     x12, [x9, #FRAME_IDX]\n",
        "tests": ["tests/runtime/test_aarch64_timing.py::"
                  "test_arguments_results_and_callee_saved_registers_through_a_timed_call"],
        "why": "a timed call on aarch64 gives the caller back its x19 (callee-saved)",
    },
    {
        "name": "arm64-forked-child-keeps-its-moved-blocks-targets",
        "file": "runtime/stats/stats.c",
        "old": "     * the thread's next counted call takes the first-count path, which gives them back. */\n    shimgen_arch_thread_fn(NULL);\n",
        "new": "     * the thread's next counted call takes the first-count path, which gives them back. */\n",
        "tests": ["tests/runtime/test_aarch64.py::test_a_forked_child_with_a_trace_file_counts_its_own_calls"],
        "why": "an aarch64 child whose blocks moved onto its own trace file still forwards its calls",
    },
    {
        "name": "arm64-timed-errors-not-counted",
        "file": "runtime/arch/aarch64/timing.S",
        "old": "        cbnz    w0, .L\\name\\()_error\n",
        "new": "        nop\n",
        "tests": ["tests/runtime/test_aarch64.py::test_run_of_an_aarch64_program_reports_its_calls"],
        "why": "an aarch64 shim's timed calls record their non-success returns (cuInit's 100)",
    },
    {
        "name": "arm64-timed-frame-not-given-back",
        "file": "runtime/arch/aarch64/timing.S",
        "old": "        str     x13, [x9, #FRAME_NEXT]\n        str     x9, [x16, #TS_FREE]\n",
        "new": "        str     x13, [x9, #FRAME_NEXT]\n",
        "tests": ["tests/runtime/test_aarch64_timing.py::test_coroutines_end_timed_calls_in_any_order",
                  "tests/runtime/test_aarch64_timing.py::test_a_signal_handlers_calls_inside_timed_calls"],
        "why": "a timed call on aarch64 gives its shadow frame back: no call goes untimed",
    },
    {
        "name": "arm64-timed-return-address-cfi-wrong",
        "file": "runtime/arch/aarch64/timing.S",
        "old": "        CFI_SAVED_AT_X19(30, FRAME_RET)",
        "new": "        CFI_SAVED_AT_X19(30, FRAME_START)",
        "tests": ["tests/runtime/test_aarch64_timing.py::test_exceptions_and_stack_walks_cross_a_timed_call"],
        "why": "a C++ exception or a stack walk crosses an aarch64 timed call (its CFI)",
    },
    {
        "name": "readme-aarch64-install-without-gxx",
        "file": "README.md",
        "old": "g++-aarch64-linux-gnu libc6-dev-arm64-cross`",
        "new": "libc6-dev-arm64-cross`",
        "tests": ["tests/devtools/test_readme.py::"
                  "test_the_aarch64_paragraph_fetches_an_arm64_driver_and_names_every_package"],
        "why": "the README's aarch64 install line names every package the aarch64 tests need "
               "(without g++-aarch64-linux-gnu 18 of them skip)",
    },
    {
        "name": "readme-arm64-driver-line-prints-the-package",
        "file": "README.md",
        "old": "| awk '{print $NF}')",
        "new": "| awk '{print $1}')",
        "tests": ["tests/devtools/test_readme.py::"
                  "test_the_aarch64_paragraph_fetches_an_arm64_driver_and_names_every_package"],
        "why": "the README's arm64 driver line gives the driver's path",
    },
    {
        "name": "run-aarch64-shim-preloaded-in-qemu",
        "file": "shimgen/run/child.py",
        "old": "    if getattr(opts, \"emulated\", \"\"):",
        "new": "    if False:",
        "tests": ["tests/runtime/test_aarch64.py::test_run_of_an_aarch64_program_reports_its_calls"],
        "why": "a shim of another architecture goes to the emulated program alone "
               "(QEMU_SET_ENV), so that qemu's own loader prints no ERROR line",
    },
    {
        "name": "run-aarch64-shim-not-seen-as-foreign",
        "file": "shimgen/run/options.py",
        "old": "    opts.emulated = arch if arch != host() else \"\"",
        "new": "    opts.emulated = \"\"",
        "tests": ["tests/runtime/test_aarch64.py::test_run_of_an_aarch64_program_reports_its_calls"],
        "why": "a shim whose architecture is not this machine's is for a program under qemu-user",
    },
    {
        "name": "timing-aarch64-event-start-is-the-elapsed-ticks",
        "file": "runtime/arch/aarch64/timing.S",
        "old": "        stp     x11, x15, [x13]                     /* start ticks, then that */\n",
        "new": "        stp     x10, x15, [x13]                     /* start ticks, then that */\n",
        "tests": ["tests/runtime/test_aarch64_timing.py::test_exceptions_cross_a_timeline_call"],
        "why": "an aarch64 timeline event starts at its call's start ticks, not its length",
   },
    {
        "name": "cross-compiler-not-asked-first",
        "file": "shimgen/shim/pipeline.py",
        "old": "    _build.cross_triplet(driver)  # its compiler is there, or one line before any work\n",
        "new": "",
        "tests": ["tests/runtime/test_aarch64.py::test_a_missing_cross_compiler_is_one_line_naming_the_packages"],
        "why": "a missing cross compiler is one line naming its packages, before any work",
    },
    {
        "name": "arm64-gates-analysed-as-x86",
        "file": "shimgen/gates/discover.py",
        "old": "    if not ARCHES[image.arch].gates:\n        raise GateDiscoveryError(",
        "new": "    if False:\n        raise GateDiscoveryError(",
        "tests": ["tests/runtime/test_aarch64.py::test_what_is_x86_64_only_says_so_in_one_line"],
        "why": "the gate analysis says plainly that it reads x86-64 code only",
    },
    {
        "name": "driver-face-hands-read-build-id-through-elf",
        "file": "shimgen/driver/__init__.py",
        "old": "    \"read_build_id\": \"notes\",\n",
        "new": "    \"read_build_id\": \"elf\",\n",
        "tests": ["tests/run/test_run_cache.py::test_the_cached_path_imports_nothing_heavy",
                  "tests/devtools/test_layout.py::test_a_face_names_the_module_that_defines_each_name"],
        "why": "a face takes each name from the module that defines it: run's cached path stays light",
    },
    {
        "name": "run-stamp-read-through-strptime",
        "file": "shimgen/trace/live.py",
        "old": "    y, mo, d, h, mi, s = map(int, parts)\n",
        "new": ("    import calendar\n    import time as _t\n"
                "    _t.strptime(main, \"%Y-%m-%dT%H:%M:%S\")\n"
                "    y, mo, d, h, mi, s = map(int, parts)\n"),
        "tests": ["tests/run/test_run_cache.py::test_the_cached_path_imports_nothing_heavy"],
        "why": "run.json's stamps are read by hand: strptime and calendar cost milliseconds at every run",
    },
    {
        "name": "run-stamp-leap-day-every-fourth-year",
        "file": "shimgen/trace/live.py",
        "old": "    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)\n",
        "new": "    leap = y % 4 == 0\n",
        "tests": ["tests/run/test_run_cache.py::test_run_json_stamps_read_as_the_calendar_reads_them"],
        "why": "a stamp on a day the calendar lacks (29 February 1900) is not a time",
    },
    {
        "name": "run-stamp-days-count-from-january",
        "file": "shimgen/trace/live.py",
        "old": "    y -= m <= 2\n",
        "new": "    y -= m < 2\n",
        "tests": ["tests/run/test_run_cache.py::test_run_json_stamps_read_as_the_calendar_reads_them"],
        "why": "the days before a date count the leap day of its own year only after February",
    },
    {
        "name": "layout-limit-counts-code-lines-only",
        "file": "tests/devtools/test_layout.py",
        "old": "    lines = text.splitlines()\n",
        "new": ("    lines = [ln for ln in text.splitlines()\n"
                "             if ln.strip() and not ln.lstrip().startswith(\"#\")]\n"),
        "tests": ["tests/devtools/test_layout.py::"
                  "test_the_limit_counts_every_line_and_excepts_a_table_that_says_so"],
        "why": "the 400-line limit counts every line of a file, its comments and blank lines too",
    },
    {
        "name": "layout-runtime-folder-includes-an-inner-header",
        "file": "runtime/memory/hooks_memory.c",
        "old": "#include \"gates/gates.h\"\n",
        "new": "#include \"gates/gateplan.h\"\n",
        "tests": ["tests/devtools/test_layout.py::"
                  "test_a_runtime_folder_includes_only_other_folders_faces"],
        "why": "a runtime folder takes another folder's inner header instead of its face",
    },
    {
        "name": "layout-data-table-said-anywhere",
        "file": "tests/devtools/test_layout.py",
        "old": "DATA_TABLE in (lines[0].lower() if lines else \"\")",
        "new": "DATA_TABLE in text.lower()",
        "tests": ["tests/devtools/test_layout.py::"
                  "test_the_limit_counts_every_line_and_excepts_a_table_that_says_so"],
        "why": "only a file whose first line says it is a table of data may pass 400 lines",
    },
    {
        "name": "trace-fields-max-word-summed",
        "file": "shimgen/trace/blocks.py",
        "old": "                    acc[j] = max(acc[j], v) if _MAXED[j] else acc[j] + v\n",
        "new": "                    acc[j] = acc[j] + v\n",
        "tests": ["tests/report/test_trace_fields.py::test_both_readers_read_every_listed_field_alike"],
        "why": "the binary reader folds each word of struct fstats by its fold: a maximum is no sum",
    },
    {
        "name": "trace-fields-json-ticks-not-ns",
        "file": "runtime/stats/trace.c",
        "old": "#define JSON_TICKS(f, v, k) shimgen_out_printf(f, \"%.0f\", (double)(v) * (k))\n",
        "new": "#define JSON_TICKS(f, v, k) shimgen_out_printf(f, \"%.0f\", (double)(v))\n",
        "tests": ["tests/report/test_trace_fields.py::test_both_readers_read_every_listed_field_alike"],
        "why": "the exit JSON writes a word of unit ticks in ns, as the binary reader reads it",
    },
    {
        "name": "trace-fields-fstats-offsets-not-the-structs",
        "file": "shimgen/runenv.py",
        "old": 'TRACE_FSTATS = {word: 8 * i for i, (word, _, _) in enumerate(TRACE_FSTATS_WORDS)}\n',
        "new": 'TRACE_FSTATS = {word: 8 * (i ^ 1 if i < 2 else i) for i, (word, _, _) in enumerate(TRACE_FSTATS_WORDS)}\n',
        "tests": ["tests/report/test_trace_fields.py::test_the_rendered_header_is_the_blocks_c_layout"],
        "why": "struct fstats is held to the one list's words (a shim with them differing does "
               "not build)",
    },
    {
        "name": "trace-fields-json-key-unlisted",
        "file": "shimgen/runenv.py",
        "old": "    (None, \"p50_ns\", None), (None, \"p90_ns\", None), (None, \"p99_ns\", None),\n",
        "new": "    (None, \"p50_ns\", None), (None, \"p90_ns\", None),\n",
        "tests": ["tests/report/test_trace_fields.py::"
                  "test_the_json_has_every_listed_key_and_no_other"],
        "why": "every key of the exit JSON is in the one list of trace fields",
    },
    # ---- what a job is doing now: calls in progress, running vs died ----
    {
        "name": "inflight-free-list-end-read-as-a-call",
        "file": "shimgen/trace/inflight.py",
        "old": "    if idx == 0 and not _Q.unpack_from(m, at + h[\"frame_off_ret\"])[0]:\n",
        "new": "    if False:\n",
        "tests": ["tests/run/test_inflight.py::test_a_reader_racing_a_busy_job_never_sees_a_wrong_"
                  "function_or_an_ended_call"],
        "why": "the free list's NULL end in a frame never used is no call of function 0",
    },
    {
        "name": "inflight-a-dead-pid-counted-running",
        "file": "shimgen/trace/job.py",
        "old": "        running = live.alive_here(f.pid, f.proc_start, f.uid)\n",
        "new": "        running = True\n",
        "tests": ["tests/run/test_inflight.py::test_a_lasting_call_is_in_flight_and_after_sigkill_"
                  "the_process_died_inside_it"],
        "why": "a process of this machine runs only while its pid lives with the same start time",
    },
    {
        "name": "inflight-calls-mode-start-is-the-place",
        "file": "shimgen/trace/inflight.py",
        "old": "        found = [(idx, start) for idx, place in found\n",
        "new": "        found = [(idx, place) for idx, place in found\n",
        "tests": ["tests/run/test_inflight.py::test_a_lasting_call_in_calls_mode_is_in_flight_with_"
                  "its_records_start"],
        "why": "in calls mode a frame keeps its record's place: the call's start is the record's",
    },
    {
        "name": "report-no-call-returned-empty-table",
        "file": "shimgen/report/format.py",
        "old": "        if g.functions:\n            lines += function_table(",
        "new": "        if True:\n            lines += function_table(",
        "tests": ["tests/run/test_inflight.py::test_a_lasting_call_is_in_flight_and_after_sigkill_the_process_died_inside_it"],
        "why": "a process killed inside its first call is said so, not shown as an empty "
               "table and errors 'not recorded'",
    },
    {
        "name": "report-no-call-returned-not-first",
        "file": "shimgen/report/format.py",
        "old": "(f\" {inside}, its first call\" if",
        "new": "(f\" {inside}\" if",
        "tests": ["tests/run/test_inflight.py::test_a_lasting_call_is_in_flight_and_after_sigkill_the_process_died_inside_it"],
        "why": "the line says the call the process died inside was its first",
    },
    # ---- the device memory ledger (runtime/memory/ledger.c, entries.c, docs/memory.md) ----
    {
        "name": "ledger-handle-freed-by-first-release",
        "file": "runtime/memory/entries.c",
        "old": "    if (i >= 0 && slots[i].refs > 1) {\n",
        "new": "    if (i >= 0 && slots[i].refs > 1 && 0) {\n",
        "tests": ["tests/run/test_memory.py::"
                  "test_retained_and_imported_handles_freed_by_their_last_release"],
        "why": "a VMM handle is freed by its last release, not its first",
    },
    {
        "name": "ledger-limit-not-checked",
        "file": "runtime/memory/ledger.c",
        "old": "    int fits = cur <= limit && size <= limit - cur;\n",
        "new": "    int fits = cur <= limit || size <= limit - cur;\n",
        "tests": ["tests/run/test_memory.py::"
                  "test_limit_refuses_before_the_driver_and_answers_with_it"],
        "why": "an allocation past the limit fails before it reaches the driver",
    },
    {
        "name": "ledger-child-waits-on-a-lock-copied-held",
        "file": "runtime/memory/ledger.c",
        "old": "    lock = 0;\n    own_process();\n}\n",
        "new": "    own_process();\n}\n",
        "tests": ["tests/run/test_memory.py::test_forks_while_other_threads_allocate"],
        "why": "a forked child never hangs on the ledger's lock that another thread held at the fork "
               "(load/fork.c resets the ledger before the child's file attaches it)",
    },
    {
        "name": "ledger-context-change-not-seen",
        "file": "runtime/memory/routes.h",
        "old": "#define MEM_WATCH_context(name) WATCH(name, ctx_changed(), ctx_changed())\n",
        "new": "#define MEM_WATCH_context(name) WATCH(name, (void)0, (void)0)\n",
        "tests": ["tests/run/test_memory.py::test_threads_switching_contexts_keep_devices_exact"],
        "why": "a thread's cached device is asked again after any context change",
    },
    {
        "name": "ledger-limit-leaves-out-pool-reservations",
        "file": "runtime/memory/ledger.c",
        "old": "    uint64_t cur = current[column] + extra[column];\n",
        "new": "    uint64_t cur = current[column];\n",
        "tests": ["tests/run/test_memory.py::test_limit_counts_pool_reservations"],
        "why": "the limit counts what pools keep reserved beyond their allocations",
    },
    {
        "name": "ledger-captured-allocation-held-by-its-route",
        "file": "runtime/memory/hooks_memory.c",
        "old": "    int captured = rc == SHIMGEN_CUDA_SUCCESS && shimgen_in_capture(s);\n",
        "new": "    int captured = 0 && shimgen_in_capture(s);\n",
        "tests": ["tests/run/test_memory.py::test_graph_memory_exact"],
        "why": "an allocation made while its stream captures is a graph's, not the route's",
    },
    {
        "name": "ledger-pool-allocation-on-the-current-device",
        "file": "runtime/memory/hooks_memory.c",
        "old": "    return c >= 0 ? c : device_column();\n",
        "new": "    return (void)c, device_column();\n",
        "tests": ["tests/run/test_memory.py::test_pools_reservations_exact"],
        "why": "an allocation from a pool is on the pool's device, not the current context's",
    },
    # ---- the NVML shim: its answers, its load, its commands (runtime/nvml/, shim/nvml.py,
    # driver/nvml.py, diff/nvml.py, run/nvml.py) ----
    {
        "name": "nvml-memory-total-not-the-limit",
        "file": "runtime/nvml/answers.c",
        "old": "    put_u64(mem, total, v.limit);\n",
        "new": "    put_u64(mem, total, real_used);\n",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_memory_info_answers_the_limit_as_total_and_the_use_within_it"],
        "why": "nvmlDeviceGetMemoryInfo (and _v2) answer the limit as total",
    },
    {
        "name": "nvml-limit-past-the-device",
        "file": "runtime/nvml/answers.c",
        "old": "    if (v.limit > real_total) /* a limit past the device is the device (as cuMemGetInfo) */\n",
        "new": "    if (v.limit > real_total + real_total)\n",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_memory_info_answers_the_limit_as_total_and_the_use_within_it"],
        "why": "a limit past the device's memory is answered as the device's total, as "
               "cuMemGetInfo_v2 answers it",
    },
    {
        "name": "nvml-view-used-is-the-limit",
        "file": "runtime/nvml/view.c",
        "old": "    out->used = real_used < limit_bytes ? real_used : limit_bytes;\n",
        "new": "    out->used = real_used > limit_bytes ? real_used : limit_bytes;\n",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_memory_info_answers_the_limit_as_total_and_the_use_within_it"],
        "why": "the use within the limit is the use, not the whole limit",
    },
    {
        "name": "nvml-v2-used-offset",
        "file": "shimgen/driver/nvml.py",
        "old": '{"version": 0, "total": 8, "reserved": 16, "free": 24, "used": 32}',
        "new": '{"version": 0, "total": 8, "reserved": 16, "free": 24, "used": 24}',
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_memory_info_answers_the_limit_as_total_and_the_use_within_it"],
        "why": "nvmlMemory_v2_t's layout is nvml.h's: used at byte 32",
    },
    {
        "name": "nvml-size-unit-shift",
        "file": "runtime/nvml/view.c",
        "old": "            shift = 10 * (i + 1);\n",
        "new": "            shift = 10 * i;\n",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_memory_info_answers_the_limit_as_total_and_the_use_within_it"],
        "why": "SHIMGEN_LIMIT_MEMORY=16GiB is 16 GiB to the NVML shim as to the libcuda shim",
    },
    {
        "name": "nvml-process-not-clamped",
        "file": "runtime/nvml/answers.c",
        "old": "        clamp_list(infos, n < cap ? n : cap, size, bytes, v.limit);\n",
        "new": "        clamp_list(infos, n < cap ? n : cap, size, bytes, ~0ULL);\n",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_no_compute_process_is_over_the_limit_in_any_version"],
        "why": "no compute process is shown over the limit, in every version of the call",
    },
    {
        "name": "nvml-unavailable-bytes-clamped",
        "file": "runtime/nvml/answers.c",
        "old": "b != SHIMGEN_NVML_VALUE_NOT_AVAILABLE && ",
        "new": "",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_no_compute_process_is_over_the_limit_in_any_version"],
        "why": "a process whose bytes NVML cannot say keeps NVML_VALUE_NOT_AVAILABLE",
    },
    {
        "name": "nvml-loads-itself",
        "file": "runtime/nvml/load.c",
        "old": "    return mine.dli_fbase == theirs.dli_fbase;\n",
        "new": "    return 0;\n",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_the_shim_never_loads_itself_as_the_real_library"],
        "why": "the shim never takes itself for the real library (it would call itself round)",
    },
    {
        "name": "nvml-dlopen-not-redirected",
        "file": "runtime/nvml/dlopen.c",
        "old": "    return strncmp(base, prefix, sizeof prefix - 1) == 0 ? self_path : file;\n",
        "new": "    return strncmp(base, prefix, sizeof prefix) == 0 ? self_path : file;\n",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_nvml_opened_by_another_name_or_its_path_is_the_shim"],
        "why": "NVML opened by another name or its real path (as nvidia-smi does) is the shim",
    },
    {
        "name": "nvml-answer-on-a-failed-call",
        "file": "runtime/nvml/answers.c",
        "old": "    if (rc != SHIMGEN_NVML_SUCCESS || !get_u64(mem, used, &real_used) ||\n",
        "new": "    if (!get_u64(mem, used, &real_used) ||\n",
        "tests": ["tests/runtime/test_nvml_shim.py::"
                  "test_a_version_mismatch_is_the_real_librarys_answer_untouched"],
        "why": "a call the real library fails is its answer, nothing written",
    },
    {
        "name": "nvml-stub-accepted",
        "file": "shimgen/driver/nvml.py",
        "old": "    if require_real and len(names) < MIN_FUNCTIONS:\n",
        "new": "    if False:\n",
        "tests": ["tests/cli/test_nvml_cli.py::"
                  "test_build_nvml_refuses_what_is_not_nvml_in_one_line"],
        "why": "build --nvml refuses a stand-in with a handful of functions, in one line",
    },
    {
        "name": "nvml-exports-refused",
        "file": "shimgen/shim/exports.py",
        "old": "        if not is_nvml(nvml):\n",
        "new": "        if True:\n",
        "tests": ["tests/cli/test_nvml_cli.py::test_exports_lists_an_nvml_librarys_functions"],
        "why": "shimgen exports reads an NVML library as it reads a libcuda",
    },
    {
        "name": "nvml-diff-differences-not-said",
        "file": "shimgen/diff/nvml.py",
        "old": "    return DIFFERENCES if d[\"removed\"] or d[\"added\"] else NO_DIFFERENCES\n",
        "new": "    return NO_DIFFERENCES\n",
        "tests": ["tests/cli/test_nvml_cli.py::"
                  "test_diff_of_two_nvml_libraries_says_the_exports_added_and_removed"],
        "why": "diff of two NVML libraries exits as diff(1): 1 when their exports differ",
    },
    {
        "name": "nvml-run-preloaded-without-a-limit",
        "file": "shimgen/run/nvml.py",
        "old": "    if not limits:\n        return None, None\n",
        "new": "",
        "tests": ["tests/run/test_run_nvml.py::"
                  "test_run_preloads_the_nvml_shim_beside_the_libcuda_shim_when_a_limit_is_set"],
        "why": "run preloads the NVML shim only when a limit is set",
    },
    {
        "name": "nvml-run-not-preloaded",
        "file": "shimgen/run/child.py",
        "old": "        shims = f\"{shim}:{nvml}\" if nvml is not None else str(shim)\n",
        "new": "        shims = str(shim)\n",
        "tests": ["tests/run/test_run_nvml.py::"
                  "test_run_preloads_the_nvml_shim_beside_the_libcuda_shim_when_a_limit_is_set"],
        "why": "with a limit, run preloads the NVML shim right after the libcuda shim",
    },
    # ---- kernels by name and each stream's last launch (runtime/kernels/, shimgen/report/kernels.py) ----
    {
        "name": "kernels-captured-launch-counted",
        "file": "runtime/kernels/hooks_kernels.c",
        "old": "    if (r != OK || shimgen_in_capture(stream))\n",
        "new": "    if (r != OK)\n",
        "tests": ["tests/runtime/test_kernels.py::test_every_route_named_and_counted_as_the_fake"],
        "why": "a launch into a stream capture runs when its graph does: not counted as a launch",
    },
    {
        "name": "kernels-failed-launch-counted",
        "file": "runtime/kernels/hooks_kernels.c",
        "old": "    if (r != OK || shimgen_in_capture(stream))\n",
        "new": "    if (shimgen_in_capture(stream))\n",
        "tests": ["tests/runtime/test_kernels.py::test_every_route_named_and_counted_as_the_fake"],
        "why": "a launch the driver refused ran nothing: not counted",
    },
    {
        "name": "kernels-name-asked-in-capture",
        "file": "runtime/kernels/hooks_kernels.c",
        "old": "(REAL(cuStreamIsCapturing, void *, int *)(stream, &status) != OK || status != 0))\n",
        "new": "(REAL(cuStreamIsCapturing, void *, int *)(stream, &status) != OK))\n",
        "tests": ["tests/runtime/test_kernels.py::test_a_name_is_never_asked_inside_a_capture"],
        "why": "the driver is never asked a name while the launch's stream captures",
    },
    {
        "name": "kernels-refused-name-asked-again",
        "file": "runtime/kernels/hooks_kernels.c",
        "old": "        shimgen_kern_name(slot, \"\", SHIMGEN_KERN_FROM_UNNAMED);\n",
        "new": "        (void)slot;\n",
        "tests": ["tests/runtime/test_kernels.py::test_a_driver_that_gives_no_names"],
        "why": "a handle the driver would not name is marked, never asked again at every launch",
    },
    {
        "name": "kernels-function-of-kernel-unnamed",
        "file": "runtime/kernels/hooks_kernels.c",
        "old": "        shimgen_kern_name_as(shimgen_kern_slot(handle), of, SHIMGEN_KERN_FROM_CUKERNELGETFUNCTION);\n",
        "new": "        (void)of;\n",
        "tests": ["tests/runtime/test_kernels.py::test_every_route_named_and_counted_as_the_fake"],
        "why": "cuKernelGetFunction's function takes its kernel's name, not a driver lookup at launch",
    },
    {
        "name": "kernels-stream-last-slot-off-by-one",
        "file": "runtime/kernels/table.c",
        "old": "(uint64_t)(slot + 1), __ATOMIC_RELAXED);\n",
        "new": "(uint64_t)slot, __ATOMIC_RELAXED);\n",
        "tests": ["tests/runtime/test_kernels.py::test_every_route_named_and_counted_as_the_fake", "tests/runtime/test_kernels.py::test_sigkilled_process_names_the_kernel_it_waits_for"],
        "why": "a stream's last kernel is the one it launched last, not its neighbour in the table",
    },
    {
        "name": "kernels-shape-change-not-counted",
        "file": "runtime/kernels/table.c",
        "old": "            if (before)\n",
        "new": "            (void)before;\n            if (0)\n",
        "tests": ["tests/runtime/test_kernels.py::test_every_route_named_and_counted_as_the_fake"],
        "why": "a launch whose grid or block differs from the one before is counted as a change",
    },
    {
        "name": "kernels-report-not-demangled",
        "file": "shimgen/report/kernels.py",
        "old": "    return shown(name if mangled or cut else demangle(name), CUT) + (",
        "new": "    return shown(name, CUT) + (",
        "tests": ["tests/runtime/test_kernels.py::test_report_kernels_section_and_json"],
        "why": "the report shows a C++ kernel demangled, raw only with --mangled",
    },
    {
        "name": "kernels-collective-majority",
        "file": "shimgen/report/kernels.py",
        "old": "        common = max(tally, key=lambda n: (tally[n], n))\n",
        "new": "        common = min(tally)\n",
        "tests": ["tests/runtime/test_kernels.py::test_the_rank_whose_collective_count_differs"],
        "why": "the rank named is the one whose count differs from most ranks', not the lowest count",
    },
    {
        "name": "kernels-calls-report-unnamed",
        "file": "shimgen/calls/decode.py",
        "old": "            return f\"{info}#{n}\", named or f\"{info}#{n}\"\n",
        "new": "            return f\"{info}#{n}\", f\"{info}#{n}\"\n",
        "tests": ["tests/runtime/test_kernels.py::test_calls_report_names_each_launch"],
        "why": "report --calls shows a launch's function by its kernel's name",
    },
    {
        "name": "kernels-in-flight-without-launch",
        "file": "shimgen/report/inflight.py",
        "old": "    if launched:\n        head += \"; \" + launched\n",
        "new": "    if 0:\n        head += \"; \" + launched\n",
        "tests": ["tests/runtime/test_kernels.py::test_sigkilled_process_names_the_kernel_it_waits_for"],
        "why": "the in-flight line names the kernel the stream last ran",
    },
    {
        "name": "kernels-child-counts-its-parents-launches",
        "file": "runtime/kernels/table.c",
        "old": "    memset(own.kern_launches, 0, sizeof own.kern_launches);\n",
        "new": "",
        "tests": ["tests/runtime/test_kernels.py::test_a_forked_child_keeps_the_names_and_counts_its_own"],
        "why": "a forked child's file counts its own launches, its parent's names kept",
    },
    {
        "name": "kernels-host-function-not-by-symbol",
        "file": "runtime/kernels/hooks_kernels.c",
        "old": "    if (dladdr(fn, &info) && info.dli_sname && info.dli_sname[0])\n",
        "new": "    if (dladdr(fn, &info) && info.dli_sname && !info.dli_sname[0])\n",
        "tests": ["tests/runtime/test_kernels.py::test_host_functions_by_symbol"],
        "why": "a host function launched on a stream is named by its symbol",
    },
    {
        "name": "kernels-timeline-launch-unnamed",
        "file": "shimgen/report/calls_timeline.py",
        "old": "    name = demangle(kernel) if kernel else g.dec.names[r[1]]  # a launch: after its kernel\n",
        "new": "    name = g.dec.names[r[1]]\n",
        "tests": ["tests/runtime/test_kernels.py::test_calls_report_names_each_launch"],
        "why": "the timeline of a calls run names each launch after its kernel",
    },
    {
        "name": "kernels-cut-name-not-said",
        "file": "shimgen/report/kernels.py",
        "old": "            o[\"cut\"] = o[\"cut\"] or k.cut\n",
        "new": "            o[\"cut\"] = o[\"cut\"]\n",
        "tests": ["tests/runtime/test_kernels.py::"
                  "test_a_name_longer_than_the_most_kept_is_cut_and_said_so"],
        "why": "a name the trace file cut is said to be cut, in the text and the JSON",
    },
    {
        "name": "kernels-cut-name-demangled",
        "file": "shimgen/report/kernels.py",
        "old": "    return [{\"name\": n, \"demangled\": n if o[\"cut\"] else demangle(n), \"launches\": o[\"launches\"],\n",
        "new": "    return [{\"name\": n, \"demangled\": demangle(n), \"launches\": o[\"launches\"],\n",
        "tests": ["tests/runtime/test_kernels.py::test_names_past_the_arena_are_cut_and_said_so"],
        "why": "a cut name is not demangled in the JSON: its part may demangle as another name",
    },
    {
        "name": "kernels-cut-name-demangled-in-the-text",
        "file": "shimgen/report/kernels.py",
        "old": "    return shown(name if mangled or cut else demangle(name), CUT) + (",
        "new": "    return shown(name if mangled else demangle(name), CUT) + (",
        "tests": ["tests/runtime/test_kernels.py::test_names_past_the_arena_are_cut_and_said_so"],
        "why": "a cut name is shown as it is in the text: its part may demangle as another name",
    },
    {
        "name": "kernels-name-cut-at-a-slots-old-size",
        "file": "runtime/kernels/table.c",
        "old": "    size_t n = name ? strnlen(name, NAME_MAX_ + 1) : 0;\n",
        "new": "    size_t n = name ? strnlen(name, 255) : 0;\n",
        "tests": ["tests/runtime/test_kernels.py::test_a_long_name_is_kept_whole"],
        "why": "a name of 1,500 bytes (PyTorch's template kernels) is kept whole, by every route",
    },
    {
        "name": "kernels-hook-reads-a-short-name",
        "file": "runtime/kernels/hooks_kernels.c",
        "old": "    char text[SHIMGEN_KERN_NAME_MAX + 2]; /* (one byte more than is kept: a longer one cut) */\n",
        "new": "    char text[256];\n",
        "tests": ["tests/runtime/test_kernels.py::test_a_long_name_is_kept_whole"],
        "why": "the program's argument is read as long as a name is kept",
    },
    {
        "name": "kernels-name-past-the-arena-not-marked-cut",
        "file": "runtime/kernels/table.c",
        "old": "        cut = NAME_CUT;\n",
        "new": "        cut = 0;\n",
        "tests": ["tests/runtime/test_kernels.py::test_names_past_the_arena_are_cut_and_said_so"],
        "why": "a name the full arena had no room for is marked cut, and said so",
    },
    {
        "name": "kernels-name-longer-than-kept-not-marked-cut",
        "file": "runtime/kernels/table.c",
        "old": "    uint64_t cut = n > NAME_MAX_ ? NAME_CUT : 0;\n",
        "new": "    uint64_t cut = 0;\n",
        "tests": ["tests/runtime/test_kernels.py::"
                  "test_a_name_longer_than_the_most_kept_is_cut_and_said_so"],
        "why": "a name longer than KERN_NAME_MAX is cut there and marked cut",
    },
    {
        "name": "kernels-reader-ignores-the-cut-bit",
        "file": "shimgen/trace/kernels.py",
        "old": "    off, n, cut = at >> 32, at & (KERN_NAME_CUT - 1), bool(at & KERN_NAME_CUT)\n",
        "new": "    off, n, cut = at >> 32, at & (KERN_NAME_CUT - 1), False\n",
        "tests": ["tests/runtime/test_kernels.py::test_names_past_the_arena_are_cut_and_said_so",
                  "tests/runtime/test_kernels.py::"
                  "test_a_name_longer_than_the_most_kept_is_cut_and_said_so"],
        "why": "the reader takes a name's cut from its slot's word",
    },
    {
        "name": "kernels-name-outside-the-arena-read",
        "file": "shimgen/trace/kernels.py",
        "old": "    if n > KERN_NAME_MAX or off + n > len(names):\n",
        "new": "    if n > KERN_NAME_MAX:\n",
        "tests": ["tests/runtime/test_kernels.py::test_a_name_outside_the_arena_is_refused"],
        "why": "a slot whose name lies past the arena is refused, not read short",
    },
    {
        "name": "kernels-in-flight-cut-name-not-said",
        "file": "shimgen/trace/inflight.py",
        "old": "        out.append(Launch(s.stream, s.kernel, s.launches, mono, real, s.cut))\n",
        "new": "        out.append(Launch(s.stream, s.kernel, s.launches, mono, real))\n",
        "tests": ["tests/runtime/test_kernels.py::"
                  "test_sigkilled_process_says_its_last_kernels_name_was_cut"],
        "why": "the in-flight line says that the kernel a stream last ran has its name cut",
    },
    {
        "name": "kernels-name-bytes-taken-without-an-atomic-add",
        "file": "runtime/kernels/table.c",
        "old": "    uint32_t at = __atomic_fetch_add(&h->kern_name_used, (uint32_t)n, __ATOMIC_RELAXED);\n",
        "new": "    uint32_t at = __atomic_load_n(&h->kern_name_used, __ATOMIC_RELAXED);\n"
               "    for (volatile int w = 0; w < 50; w++) /* (a read, a moment, a store) */\n"
               "        ;\n"
               "    __atomic_store_n(&h->kern_name_used, at + (uint32_t)n, __ATOMIC_RELAXED);\n",
        "tests": ["tests/runtime/test_kernels.py::"
                  "test_names_made_by_racing_threads_are_each_whole"],
        "why": "racing threads take the arena's bytes by one atomic add: no two names share bytes",
    },
    {
        "name": "kernels-text-lists-handles-never-launched",
        "file": "shimgen/report/kernels.py",
        "old": "    rows = sorted(((n, o) for n, o in tot.items() if o[\"launches\"]),\n",
        "new": "    rows = sorted(((n, o) for n, o in tot.items()),\n",
        "tests": ["tests/runtime/test_kernels.py::test_names_past_the_arena_are_cut_and_said_so"],
        "why": "the text's table lists kernels launched; handles never launched are one line",
    },
    # ---- calls mode: the records and their reading ----
    {
        "name": "calls-stack-arguments-not-copied",
        "file": "runtime/arch/x86_64/calls.S",
        "old": "        test    $CALLS_INFO_STACK, %al\n        jz      1f\n",
        "new": "        test    $CALLS_INFO_STACK, %al\n        jmp     1f\n",
        "tests": ["tests/runtime/test_calls.py::test_every_route_gives_back_each_argument_output_and_result"],
        "why": "a function of more than six arguments keeps its stack arguments (cuLaunchKernel's 11)",
    },
    {
        "name": "calls-wrapped-ring-read-from-slot-0",
        "file": "shimgen/calls/records.py",
        "old": "        slots = [*range(first + at, first + n), *range(first, first + at)]\n",
        "new": "        slots = [*range(first, first + at), *range(first + at, first + n)]\n",
        "tests": ["tests/runtime/test_calls.py::test_the_ring_keeps_exactly_the_last_calls"],
        "why": "a ring that wrapped gives exactly its last calls, in order",
    },
    {
        "name": "calls-report-memo-keyed-by-function-alone",
        "file": "shimgen/report/calls.py",
        "old": "            t = memo.get((idx, state, body)) or miss(memo, (idx, state, body), text, row)\n",
        "new": "            t = memo.get((idx, state)) or miss(memo, (idx, state), text, row)\n",
        "tests": ["tests/runtime/test_calls_output.py::test_the_fast_report_is_the_per_record_decode"],
        "why": "a decoded line is kept under all its record's raw bytes, so the fast report is the per-record decode",
    },
    {
        "name": "calls-timeline-events-without-arguments",
        "file": "shimgen/report/calls_timeline.py",
        "old": "    return head, json.dumps({\"args\": {n: t if a else v for n, v, t, a in args},\n",
        "new": "    return head, json.dumps({\"args\": {},\n",
        "tests": ["tests/runtime/test_calls_output.py::test_the_timeline_of_a_calls_run_carries_each_calls_arguments",
                  "tests/run/test_run.py::test_a_calls_run_writes_its_timeline_with_each_calls_arguments"],
        "why": "a calls run's timeline events carry each call's decoded arguments in args",
    },
    {
        "name": "first-difference-always-exits-0",
        "file": "shimgen/report/main.py",
        "old": "        return PARTED if parted else SAME\n",
        "new": "        return SAME\n",
        "tests": ["tests/report/test_calls_hostile.py::test_first_difference_exits_as_diff_does"],
        "why": "--first-difference exits 1 when the runs part, as diff(1) does",
    },
    {
        "name": "first-difference-more-threads-not-parted",
        "file": "shimgen/report/calls_diff.py",
        "old": "    return \"\\n\".join(out) + \"\\n\", bool(found or extra)",
        "new": "    return \"\\n\".join(out) + \"\\n\", bool(found)",
        "tests": ["tests/report/test_calls_hostile_more.py::"
                  "test_the_runs_part_when_a_thread_or_their_number_differs"],
        "why": "a run with more threads than the other parts from it (exit 1)",
    },
    {
        "name": "first-difference-trouble-exits-1",
        "file": "shimgen/report/main.py",
        "old": "            return TROUBLE\n        sys.stdout.flush()\n",
        "new": "            raise\n        sys.stdout.flush()\n",
        "tests": ["tests/report/test_calls_hostile.py::test_first_difference_exits_as_diff_does"],
        "why": "--first-difference's trouble exits 2, apart from the 1 of runs that part",
    },
    {
        "name": "calls-sqlite-prints-every-line",
        "file": "shimgen/report/calls.py",
        "old": "        out.write(\"\\n\".join(head + [\"\"]))\n        return None\n",
        "new": "        pass\n",
        "tests": ["tests/runtime/test_calls_output.py::test_the_table_is_the_per_record_decode"],
        "why": "--sqlite FILE is an export: it prints its summary, not every call's line",
    },
    {
        "name": "calls-json-start-under-its-old-name-only",
        "file": "shimgen/report/calls.py",
        "old": "\"seq\": {seq}, \"start_s\": {t}, \"t\": {t}, {mid}",
        "new": "\"seq\": {seq}, \"t\": {t}, {mid}",
        "tests": ["tests/runtime/test_calls_output.py::test_the_table_is_the_per_record_decode"],
        "why": "a call's start has one name, start_s, in the JSON as in the SQL table",
    },
    {
        "name": "calls-pointed-string-not-followed",
        "file": "runtime/stats/calls.c",
        "old": "    if (!p)\n        return 0; /* NULL: no string */\n",
        "new": "    return 0;\n",
        "tests": ["tests/runtime/test_calls.py::test_every_route_gives_back_each_argument_output_and_result"],
        "why": "a string output the driver points to (cuGetErrorName's pStr) is the string",
    },
    {
        "name": "calls-pfn-not-mapped-to-its-export",
        "file": "runtime/stats/calls.c",
        "old": "                slot = i + 1;\n",
        "new": "                slot = 0;\n",
        "tests": ["tests/runtime/test_calls.py::test_every_route_gives_back_each_argument_output_and_result"],
        "why": "cuGetProcAddress's pfn is shown as the export it points to (cuMemAlloc_v2)",
    },
    {
        "name": "calls-pfn-not-captured",
        "file": "shimgen/calls/model.py",
        "old": "            and name in runenv.CALLS_FUNCTION_OUTPUTS:",
        "new": "            and False:",
        "tests": ["tests/runtime/test_calls.py::test_every_route_gives_back_each_argument_output_and_result"],
        "why": "a successful cuGetProcAddress has its pfn among its outputs",
    },
    {
        "name": "calls-ring-whole-on-disk-at-once",
        "file": "runtime/stats/calls.c",
        "old": "    return ring_off() - page_up(sizeof(struct tstats)) + ring_first() * SHIMGEN_CALLS_RECORD_SIZE;\n",
        "new": "    return ring_bytes();\n",
        "tests": ["tests/runtime/test_calls.py::test_the_rings_file_grows_as_it_fills"],
        "why": "a calls trace takes disk space as its rings fill, not a whole ring per thread before the first call",
    },
    {
        "name": "calls-ring-grows-by-a-step-not-doubling",
        "file": "runtime/stats/calls.c",
        "old": "        want = room < RING_FIRST ? RING_FIRST : room * 2;\n",
        "new": "        want = room < RING_FIRST ? RING_FIRST : room + RING_FIRST;\n",
        "tests": ["tests/runtime/test_calls.py::test_the_rings_file_grows_as_it_fills"],
        "why": "a ring grows by doubling: a power of two a full disk can leave it at",
    },
    {
        "name": "calls-ring-place-past-its-room-not-grown",
        "file": "runtime/arch/x86_64/calls.S",
        "old": "        jae     .Lcalls_grow                        /* no disk space for it yet */\n",
        "new": "        nop\n",
        "tests": ["tests/runtime/test_calls.py::test_the_rings_file_grows_as_it_fills"],
        "why": "a record is written only where the file has disk space (past the file's end: SIGBUS)",
    },
    {
        "name": "calls-ring-that-cannot-grow-keeps-writing-past-its-room",
        "file": "runtime/stats/calls.c",
        "old": "    __atomic_store_n(&s->ev_mask, room - 1, __ATOMIC_RELEASE);\n",
        "new": "",
        "tests": ["tests/runtime/test_trace_disk_full.py::test_a_ring_of_calls_that_cannot_grow_keeps_its_last_calls"],
        "why": "on a full disk the ring keeps what it has room for, never a page the disk has no room for",
    },
    {
        "name": "calls-reader-ring-size-from-the-header-alone",
        "file": "shimgen/calls/records.py",
        "old": "    return mask + 1 if ok else n\n",
        "new": "    return n\n",
        "tests": ["tests/runtime/test_trace_disk_full.py::test_a_ring_of_calls_that_cannot_grow_keeps_its_last_calls"],
        "why": "a ring that could not grow is read at the size its block says",
    },
    {
        "name": "trace-reader-last-block-whole-strides-only",
        "file": "shimgen/trace/binary.py",
        "old": "        n += 1\n    return min(n, h[\"blocks_reserved\"])\n",
        "new": "    return min(n, h[\"blocks_reserved\"])\n",
        "tests": ["tests/runtime/test_calls.py::test_the_rings_file_grows_as_it_fills"],
        "why": "the last block of a calls trace, whose ring has not grown to its stride, is read",
    },
    {
        "name": "trace-reader-a-calls-file-cut-in-its-last-ring-read-as-grown",
        "file": "shimgen/trace/binary.py",
        "old": "    return bool(n) and not r and min(CALLS_RING_MIN, n) <= q < n and not q & (q - 1)\n",
        "new": "    return bool(n) and rest >= off\n",
        "tests": ["tests/report/test_calls_hostile_more.py::test_a_trace_cut_or_zeroed_at_any_byte_is_said"
                  "_never_a_traceback[calls]"],
        "why": "a calls file cut short is said truncated: a ring's part of the file ends only where a doubling does",
    },
    {
        "name": "run-trace-size-apparent-not-on-disk",
        "file": "shimgen/run/summary.py",
        "old": "                files, used = files + 1, used + st.st_blocks * 512\n",
        "new": "                files, used = files + 1, used + st.st_size\n",
        "tests": ["tests/run/test_run.py::test_a_calls_run_writes_its_timeline_with_each_calls_arguments"],
        "why": "the run says what its traces take on disk",
    },
    {
        "name": "saferead-string-read-past-its-slot",
        "file": "runtime/base/saferead.c",
        "old": "    long got = shimgen_safe_read(dst, src, cap - 1);\n",
        "new": "    long got = shimgen_safe_read(dst, src, cap);\n",
        "tests": ["tests/runtime/test_calls.py::test_a_string_longer_than_its_slot_is_cut_and_what_follows_is_whole"],
        "why": "a string as long as its capture slot is cut to the slot less its NUL; nothing past the slot is written",
    },
    {
        "name": "calls-fifth-stack-word-read-as-the-fourth",
        "file": "runtime/arch/x86_64/calls.S",
        "old": "        mov     40(%rsp), %rcx\n",
        "new": "        mov     32(%rsp), %rcx\n",
        "tests": ["tests/runtime/test_calls.py::test_every_route_gives_back_each_argument_output_and_result"],
        "why": "each stack argument is recorded from its own word (cuLaunchKernel's extra is not kernelParams)",
    },
    {
        "name": "calls-int-sign-bit-past-its-width",
        "file": "shimgen/calls/decode.py",
        "old": "            if kind == \"int\" and v >> (bits - 1):\n",
        "new": "            if kind == \"int\" and v >> bits:\n",
        "tests": ["tests/runtime/test_calls.py::test_a_string_longer_than_its_slot_is_cut_and_what_follows_is_whole"],
        "why": "a negative int argument is printed negative",
    },
    {
        "name": "calls-enum-alias-later-name",
        "file": "shimgen/calls/parse.py",
        "old": "            values.setdefault(v, en.name)\n",
        "new": "            values[v] = en.name\n",
        "tests": ["tests/runtime/test_calls.py::test_an_enum_value_with_aliases_is_printed_by_its_first_name"],
        "why": "an enum value with aliases is printed under its first name, not a later deprecated one",
    },
    {
        "name": "calls-pfn-oldest-version-chosen",
        "file": "shimgen/calls/model.py",
        "old": "        if m and (best is None or int(m.group(1)) > best[0]):\n",
        "new": "        if m and (best is None or int(m.group(1)) < best[0]):\n",
        "tests": ["tests/runtime/test_calls.py::test_an_export_found_through_its_pfn_typedefs_has_the_newest_prototype"],
        "why": "an export known only through PFN_<name>_v<N> typedefs is decoded with the newest one",
   },
    # ---- report --calls, --sqlite, in flight, top and --stall on what a file can say ----
    {
        "name": 'calls-report-line-not-escaped',
        "file": 'shimgen/report/calls.py',
        "old": '            return escaped(texter(r[1])(r, handles))\n',
        "new": '            return texter(r[1])(r, handles)\n',
        "tests": ['tests/report/test_calls_hostile.py::test_a_captured_string_is_escaped_in_every_text_view_and_exact_elsewhere'],
        "why": "report --calls prints a captured string's control characters escaped, never raw",
    },
    {
        "name": 'calls-first-difference-line-not-escaped',
        "file": 'shimgen/report/calls.py',
        "old": '        return f"{t:.6f} [{r[3]}] {escaped(self.dec.text(r, self.handles))}{dur}"\n',
        "new": '        return f"{t:.6f} [{r[3]}] {self.dec.text(r, self.handles)}{dur}"\n',
        "tests": ['tests/report/test_calls_hostile.py::test_a_captured_string_is_escaped_in_every_text_view_and_exact_elsewhere'],
        "why": '--first-difference prints the calls it shows escaped',
    },
    {
        "name": 'calls-duration-of-a-call-in-progress',
        "file": 'shimgen/report/calls.py',
        "old": '            d = durs.get(dur if state == RETURNED else -1)\n',
        "new": '            d = durs.get(dur)\n',
        "tests": ['tests/report/test_calls_hostile_more.py::test_a_call_that_never_returned_has_no_duration'],
        "why": 'a call that never returned is shown without a made-up duration',
    },
    {
        "name": 'calls-diff-context-not-clamped',
        "file": 'shimgen/report/calls_diff.py',
        "old": 'ca[max(0, i - CONTEXT):i]',
        "new": 'ca[i - CONTEXT:i]',
        "tests": ['tests/report/test_calls_hostile_more.py::test_a_difference_in_the_first_calls_has_the_calls_before_it'],
        "why": 'a difference among the first calls is shown with the calls before it',
    },
    {
        "name": 'calls-diff-context-of-four',
        "file": 'shimgen/report/calls_diff.py',
        "old": 'CONTEXT = 3  # calls shown before the first difference\n',
        "new": 'CONTEXT = 4  # calls shown before the first difference\n',
        "tests": ['tests/report/test_calls_hostile_more.py::test_a_later_difference_has_exactly_the_three_calls_before_it'],
        "why": '--first-difference shows the three calls before a difference, as docs/report.md says',
    },
    {
        "name": 'calls-diff-rank-left-out-of-the-order',
        "file": 'shimgen/report/calls_diff.py',
        "old": '    order = {p.pid: (p.rank or "", p.calib_ns0) for p in procs}\n',
        "new": '    order = {p.pid: (p.rank and "", p.calib_ns0) for p in procs}\n',
        "tests": ['tests/report/test_calls_hostile_more.py::test_threads_are_paired_by_rank_then_start_then_first_call'],
        "why": "--first-difference pairs the processes of two runs by rank before start",
    },
    {
        "name": 'calls-diff-threads-ordered-by-their-second-call',
        "file": 'shimgen/report/calls_diff.py',
        "old": '    keys = sorted(per, key=lambda k: (order[k[0]], per[k][0][2]))\n',
        "new": '    keys = sorted(per, key=lambda k: (order[k[0]], per[k][-1][2]))\n',
        "tests": ['tests/report/test_calls_hostile_more.py::test_threads_are_paired_by_rank_then_start_then_first_call'],
        "why": "a process's threads are paired in order of their first call",
    },
    {
        "name": 'calls-diff-compares-the-addresses-only',
        "file": 'shimgen/report/calls_diff.py',
        "old": '    return ((g.dec.names[r[IDX]], tuple((n, t) for n, _, t, a in args if not a),\n',
        "new": '    return ((g.dec.names[r[IDX]], tuple((n, t) for n, _, t, a in args if a),\n',
        "tests": ['tests/report/test_calls_hostile_more.py::test_calls_are_compared_without_their_addresses_which_are_kept_apart'],
        "why": "--first-difference compares every argument but the addresses (kept apart for --addresses)",
    },
    {
        "name": 'calls-diff-addresses-compared-unasked',
        "file": 'shimgen/report/calls_diff.py',
        "old": '        if ka[0] != kb[0] or (addresses and ka[1] != kb[1]):\n',
        "new": '        if ka[0] != kb[0] or (addresses or ka[1] != kb[1]):\n',
        "tests": ['tests/report/test_calls_hostile_more.py::test_addresses_part_two_threads_only_when_asked'],
        "why": "--first-difference ignores addresses unless --addresses is given",
    },
    {
        "name": 'calls-diff-length-not-compared',
        "file": 'shimgen/report/calls_diff.py',
        "old": '    return None if len(a) == len(b) else min(len(a), len(b))\n',
        "new": '    return None\n',
        "tests": ['tests/report/test_calls_hostile_more.py::test_a_thread_that_stopped_early_is_a_difference'],
        "why": 'a thread that stopped early is a difference, never "no difference"',
    },
    {
        "name": 'escaping-rule-c0-only',
        "file": 'shimgen/errors.py',
        "old": '    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)\n',
        "new": '    return "".join(c if c >= " " else repr(c)[1:-1] for c in text)\n',
        "tests": ['tests/report/test_report_escaping.py::test_one_escaping_rule_for_every_line_made_of_text_from_outside'],
        "why": 'every view escapes DEL, C1 controls, separators, overrides and lone surrogates too',
    },
    {
        "name": 'escaping-error-line-unescaped',
        "file": 'shimgen/errors.py',
        "old": '    return printable_line("; ".join(parts))\n',
        "new": '    return "; ".join(parts)\n',
        "tests": ['tests/report/test_report_escaping.py::test_one_escaping_rule_for_every_line_made_of_text_from_outside'],
        "why": 'an error line escapes what it quotes by the one rule',
    },
    {
        "name": 'run-end-in-the-future-taken',
        "file": 'shimgen/trace/live.py',
        "old": '        return None if t is None or t - now_real_ns >= AHEAD_S * 1e9 else t\n',
        "new": '        return t\n',
        "tests": ['tests/report/test_report_future_times.py::test_a_run_end_in_the_future_is_not_when_a_died_process_call_is_measured_to', 'tests/report/test_report_future_times.py::test_report_and_top_name_each_time_in_the_future_that_they_ignored'],
        "why": 'a time in the future is never used as now: a died process\'s call is measured until now',
    },
    {
        "name": 'future-time-ignored-unsaid-in-report',
        "file": 'shimgen/report/format.py',
        "old": '        lines += [f"ignored    {shown(line)}" for line in s.ignored]\n',
        "new": '',
        "tests": ['tests/report/test_report_future_times.py::test_report_and_top_name_each_time_in_the_future_that_they_ignored'],
        "why": 'the report says each time of a run directory it ignored, and why',
    },
    {
        "name": 'future-time-ignored-unsaid-in-top',
        "file": 'shimgen/top/view.py',
        "old": '    lines += [f"(ignored: {shown(line)})" for line in ignored]\n',
        "new": '',
        "tests": ['tests/report/test_report_future_times.py::test_report_and_top_name_each_time_in_the_future_that_they_ignored'],
        "why": 'top says each time of a run directory it ignored, and why',
    },
    {
        "name": 'calls-unreadable-file-refuses-run',
        "file": 'shimgen/calls/records.py',
        "old": '    if unreadable is None or not path.is_dir():\n',
        "new": '    if True:\n',
        "tests": ['tests/report/test_calls_left_out.py::test_every_calls_view_reports_what_it_can_read_and_names_what_it_left_out'],
        "why": 'one trace file that cannot be read leaves that file out of report --calls, not the run',
    },
    {
        "name": 'calls-unreadable-none-read-not-refused',
        "file": 'shimgen/calls/records.py',
        "old": '    if not out:\n        f, why = bad[0]\n',
        "new": '    if not out and False:\n        f, why = bad[0]\n',
        "tests": ['tests/report/test_calls_left_out.py::test_a_run_of_which_no_trace_can_be_read_is_refused_in_one_line'],
        "why": 'a run of which no trace can be read is refused in one line, never an empty report',
    },
    {
        "name": 'calls-unreadable-unsaid-in-text',
        "file": 'shimgen/report/calls.py',
        "old": '    head = (_verdict(procs, groups, n) + unreadable_lines(unreadable)\n',
        "new": '    head = (_verdict(procs, groups, n)\n',
        "tests": ['tests/report/test_calls_left_out.py::test_every_calls_view_reports_what_it_can_read_and_names_what_it_left_out'],
        "why": 'report --calls names each file it left out, and why',
    },
    {
        "name": 'calls-unreadable-unsaid-in-difference',
        "file": 'shimgen/report/calls_diff.py',
        "old": '    out += unreadable_lines(ua + ub)\n',
        "new": '',
        "tests": ['tests/report/test_calls_left_out.py::test_every_calls_view_reports_what_it_can_read_and_names_what_it_left_out'],
        "why": '--first-difference names each file it left out, and why',
    },
    {
        "name": 'trace-header-words-not-the-plain-reports',
        "file": 'shimgen/trace/binary.py',
        "old": '            size = os.fstat(f.fileno()).st_size\n            _whole_header(f, size)\n',
        "new": '            size = os.fstat(f.fileno()).st_size\n',
        "tests": ['tests/report/test_calls_left_out.py::test_every_calls_view_reports_what_it_can_read_and_names_what_it_left_out'],
        "why": 'report --calls says why a file was left out in the plain report\'s words',
    },
    {
        "name": 'calls-ring-head-unbounded',
        "file": 'shimgen/calls/records.py',
        "old": '        if any(x > HEAD_MAX for x in heads):',
        "new": '        if False:',
        "tests": ['tests/report/test_calls_hostile.py::test_a_ring_head_no_thread_can_reach_is_refused_in_every_view'],
        "why": 'a ring head no thread can reach is refused in one line, never an internal error',
    },
    {
        "name": 'calls-ring-head-bound-off-by-one',
        "file": 'shimgen/calls/records.py',
        "old": '        if any(x > HEAD_MAX for x in heads):',
        "new": '        if any(x >= HEAD_MAX for x in heads):',
        "tests": ['tests/report/test_calls_hostile.py::test_a_ring_head_of_2_63_less_one_is_read'],
        "why": 'every head up to 2^63 - 1 is read',
    },
    {
        "name": 'calls-sqlite-replaces-any-file',
        "file": 'shimgen/report/calls_sql.py',
        "old": '    if os.path.lexists(path) and not _ours(path):\n',
        "new": '    if os.path.lexists(path) and not os.path.isfile(path):\n',
        "tests": ['tests/report/test_calls_hostile.py::test_sqlite_replaces_only_a_database_shimgen_marked[empty]', 'tests/report/test_calls_hostile.py::test_sqlite_replaces_only_a_database_shimgen_marked[foreign-calls-table]'],
        "why": '--sqlite replaces no file shimgen did not write, an empty one included',
    },
    {
        "name": 'calls-sqlite-mark-unchecked',
        "file": 'shimgen/report/calls_sql.py',
        "old": '            == APPLICATION_ID\n',
        "new": '            == int.from_bytes(head[_AT_APPLICATION_ID:_AT_APPLICATION_ID + 4], "big")\n',
        "tests": ['tests/report/test_calls_hostile.py::test_sqlite_replaces_only_a_database_shimgen_marked[another-application-id]'],
        "why": "only a database with shimgen's application_id is replaced",
    },
    {
        "name": 'calls-sqlite-temporary-file-left',
        "file": 'shimgen/report/calls_sql.py',
        "old": '                os.unlink(tmp)\n',
        "new": '                pass\n',
        "tests": ['tests/report/test_calls_hostile.py::test_sqlite_leaves_no_temporary_file_on_any_failure[interrupted]', 'tests/report/test_calls_hostile.py::test_sqlite_leaves_no_temporary_file_on_any_failure[reader-error]'],
        "why": '--sqlite leaves no temporary file, whatever ends the writing',
    },
    {
        "name": 'calls-sqlite-result-unsigned',
        "file": 'shimgen/report/calls.py',
        "old": 'signed64(d["result"])',
        "new": 'd["result"]',
        "tests": ['tests/report/test_calls_hostile.py::test_a_result_above_2_63_is_kept_in_the_table_as_its_twos_complement'],
        "why": "a result above 2^63 is stored as its two's complement, never an internal error",
    },
    {
        "name": 'inflight-function-not-escaped',
        "file": 'shimgen/report/inflight.py',
        "old": '{host:<12} {shown(c.function, CUT)}',
        "new": '{host:<12} {c.function}',
        "tests": ['tests/report/test_calls_hostile_more.py::test_in_flight_lines_top_and_stall_notices_escape_what_a_file_says'],
        "why": "the in-flight lines print a function's name escaped",
    },
    {
        "name": 'stall-notice-function-not-escaped',
        "file": 'shimgen/run/watch.py',
        "old": 'has been inside {shown(function)} for',
        "new": 'has been inside {function} for',
        "tests": ['tests/report/test_calls_hostile_more.py::test_in_flight_lines_top_and_stall_notices_escape_what_a_file_says'],
        "why": "a --stall notice prints the function's name escaped",
    },
    {
        "name": 'top-rank-any-unicode-digit',
        "file": 'shimgen/top/view.py',
        "old": '    number = r.isascii() and r.isdigit()',
        "new": '    number = r.isdigit()',
        "tests": ['tests/report/test_calls_hostile_more.py::test_in_flight_lines_top_and_stall_notices_escape_what_a_file_says'],
        "why": "top sorts a rank such as '\\u00b2' without a traceback",
    },
    {
        "name": 'live-heartbeat-from-the-future-fresh',
        "file": 'shimgen/trace/live.py',
        "old": '                and hb - now_real_ns < AHEAD_S * 1e9)',
        "new": '                and True)',
        "tests": ['tests/report/test_calls_hostile_more.py::test_a_heartbeat_from_the_future_is_no_node_that_runs'],
        "why": "a heartbeat from the future does not make a node's processes run forever",
    },
    {
        "name": 'live-process-owner-unchecked',
        "file": 'shimgen/trace/live.py',
        "old": '            if os.stat(f"/proc/{pid}").st_uid != uid:\n',
        "new": '            if False:\n',
        "tests": ['tests/report/test_calls_hostile_more.py::test_a_trace_naming_a_process_of_another_user_is_not_taken_for_it'],
        "why": "a trace file naming another user's process is not taken for a running process of the job",
    },
    {
        "name": "limit-cli-no-upper-bound",
        "file": "shimgen/run/limits.py",
        "old": "    return value if not rest and 0 < value <= SIZE_MAX else None\n",
        "new": "    return value if not rest and 0 < value else None\n",
        "tests": ["tests/run/test_memory_race.py::test_the_largest_size_is_taken_by_both"],
        "why": "--limit refuses a size past 2^64 - 1 bytes (16777216T) in one line, never takes it as no limit",
    },
    {
        "name": "limit-one-byte-refused",
        "file": "shimgen/run/limits.py",
        "old": "    return value if not rest and 0 < value <= SIZE_MAX else None\n",
        "new": "    return value if not rest and 1 < value <= SIZE_MAX else None\n",
        "tests": ["tests/run/test_memory.py::test_sizes"],
        "why": "a size of one byte is a size",
    },
    {
        "name": "limit-unit-takes-the-byte-after-it",
        "file": "shimgen/run/limits.py",
        "old": "        shift, rest = 10 * (SIZE_UNITS.index(rest[0]) + 1), rest[1:]\n",
        "new": "        shift, rest = 10 * (SIZE_UNITS.index(rest[0]) + 1), rest[2:]\n",
        "tests": ["tests/run/test_memory.py::test_sizes"],
        "why": "only iB, B or nothing may follow a size's unit",
    },
    {
        "name": "inflight-exec-chain-oldest-image",
        "file": "shimgen/trace/job.py",
        "old": "        if old is None or (f.start_ns, not f.complete) > (old[0].start_ns, not old[0].complete):\n",
        "new": "        if old is None or (f.start_ns, not f.complete) < (old[0].start_ns, not old[0].complete):\n",
        "tests": ["tests/run/test_inflight_units.py::test_an_exec_chain_is_one_process_its_last_image"],
        "why": "a process that exec'd is shown by the image that runs now, not the one before the exec",
    },
    {
        "name": "inflight-other-hosts-process-judged-by-a-local-pid",
        "file": "shimgen/trace/job.py",
        "old": "    same_boot = bool(here) and f.boot_id == here\n",
        "new": "    same_boot = bool(here) or f.boot_id == here\n",
        "tests": ["tests/run/test_inflight_units.py::test_a_process_is_judged_by_its_pid_on_this_boot_and_by_its_node_elsewhere"],
        "why": "a process of another boot (another host) runs while its node's heartbeat is fresh, whatever pid lives here",
    },
    {
        "name": "inflight-longest-call-an-untimed-one",
        "file": "shimgen/trace/job.py",
        "old": "        timed = [c for c in self.calls if c.seconds is not None]\n",
        "new": "        timed = [c for c in self.calls if c.seconds is None]\n",
        "tests": ["tests/run/test_inflight_units.py::test_a_processs_longest_call_and_its_key"],
        "why": "a process's longest call in flight is the longest of those whose age is known",
    },
    {
        "name": "stall-left-time-from-when-seen",
        "file": "shimgen/run/watch.py",
        "old": "                    self.said[key] = (time.monotonic() - c.seconds, p.pid, p.rank, command)\n",
        "new": "                    self.said[key] = (time.monotonic(), p.pid, p.rank, command)\n",
        "tests": ["tests/run/test_inflight_units.py::test_a_stalled_call_left_after_its_whole_time"],
        "why": "--stall's \"left after N s\" counts from the call's start, not from when it was seen",
    },
    {
        "name": "top-ranks-sorted-as-text",
        "file": "shimgen/top/view.py",
        "old": "    return (r == \"\", not number, int(r) if number else 0, r, p.host, p.pid)\n",
        "new": "    return (r == \"\", not number, r, p.host, p.pid)\n",
        "tests": ["tests/run/test_inflight_units.py::test_top_orders_ranks_by_number"],
        "why": "top lists rank 2 before rank 10",
    },
    {
        "name": "top-other-ranks-among-the-numbers",
        "file": "shimgen/top/view.py",
        "old": "    return (r == \"\", not number, int(r) if number else 0, r, p.host, p.pid)\n",
        "new": "    return (r == \"\", int(r) if number else 0, r, p.host, p.pid)\n",
        "tests": ["tests/run/test_inflight_units.py::test_top_orders_ranks_by_number"],
        "why": "top lists the ranks that are numbers in order, a rank that is no number after them",
    },
    {
        "name": "calls-report-seconds-not-rounded-as-round",
        "file": "shimgen/report/calls.py",
        "old": "        text = f\"{t:.9f}\".rstrip(\"0\")\n",
        "new": "        text = f\"{t:.10f}\".rstrip(\"0\")\n",
        "tests": ["tests/runtime/test_calls_output.py::test_seconds_in_json_are_round_to_nine_places"],
        "why": "the JSON's seconds are what json.dumps of round(t, 9) writes",
    },
    {
        "name": "calls-handles-all-number-one",
        "file": "shimgen/calls/decode.py",
        "old": "                n = handles[key] = handles.get(info, 0) + 1\n",
        "new": "                n = handles[key] = 1\n",
        "tests": ["tests/runtime/test_calls.py::test_every_route_gives_back_each_argument_output_and_result"],
        "why": "handles are numbered per type in order of first appearance",
    },
    {
        "name": "calls-capture-string-read-unchecked",
        "file": "runtime/stats/calls.c",
        "old": "            got = shimgen_safe_string((char *)dst, c->size, src);\n",
        "new": "            got = (long)strlen(strncpy((char *)dst, src, c->size - 1));\n",
        "tests": ["tests/runtime/test_badpointers.py::test_bad_pointers_to_the_real_driver_end_as_without_the_shim[calls]",
                  "tests/runtime/test_calls_unread.py::test_an_unreadable_name_is_recorded_as_such"],
        "why": "a string the program passed is read so that an unreadable address never faults",
    },
    {
        "name": "calls-capture-struct-read-unchecked",
        "file": "runtime/stats/calls.c",
        "old": "            got = shimgen_safe_read(dst, src, c->size) == (long)c->size ? 0 : -1;\n",
        "new": "            got = (memcpy(dst, src, c->size), 0);\n",
        "tests": ["tests/runtime/test_badpointers.py::test_bad_pointers_to_the_real_driver_end_as_without_the_shim[calls]"],
        "why": "a struct the program passed is read so that an unreadable address never faults",
    },
    {
        "name": "calls-unreadable-capture-not-marked",
        "file": "runtime/stats/calls.c",
        "old": "            unread |= 1ull << (k - first);\n",
        "new": "            (void)first;\n",
        "tests": ["tests/runtime/test_calls_unread.py::test_an_unreadable_name_is_recorded_as_such",
                  "tests/runtime/test_calls_unread.py::test_reads_refused_by_the_kernel_are_recorded_unread_and_the_program_goes_on"],
        "why": "a capture that could not be read is recorded as such, never as an empty string",
    },
    {
        "name": "calls-unreadable-capture-shown-as-read",
        "file": "shimgen/calls/decode.py",
        "old": "    return (\"unreadable\", \"unreadable\") if mask >> bit & 1 else None\n",
        "new": "    return None\n",
        "tests": ["tests/runtime/test_calls_unread.py::test_an_unreadable_name_is_recorded_as_such"],
        "why": "the report shows an argument the shim could not read as <unreadable ADDRESS>",
    },
    {
        "name": "calls-record-published-after-its-captures",
        "file": "runtime/arch/x86_64/calls.S",
        "old": "        mov     %rax, REC_SEQ(%rdi)                 /* entered, before any capture */\n",
        "new": "        nop\n",
        "tests": ["tests/runtime/test_calls_unread.py::test_a_process_killed_while_its_arguments_are_read_keeps_the_call_in_flight"],
        "why": "a process that dies while its arguments are read keeps the call as entered",
    },
    {
        "name": "calls-half-written-record-counted-dropped",
        "file": "shimgen/calls/records.py",
        "old": "    if kept and head > n:\n",
        "new": "    if kept and head > len(kept):\n",
        "tests": ["tests/runtime/test_calls_unread.py::test_a_half_written_record_is_no_dropped_call"],
        "why": "the dropped count is the calls of earlier turns only, not a record being written",
    },
    {
        "name": "saferead-fallback-reads-unmapped-pages",
        "file": "runtime/base/saferead.c",
        "old": "        if (mincore((void *)base, (size_t)pg, &resident) != 0) {",
        "new": "        if (0 && mincore((void *)base, (size_t)pg, &resident) != 0) {",
        "tests": ["tests/runtime/test_calls_unread.py::"
                  "test_where_the_kernel_refuses_process_vm_readv_a_mapped_page_is_still_read"],
        "why": "where process_vm_readv is refused, a page nothing maps is never read",
    },
    {
        "name": "saferead-refused-gives-up",
        "file": "runtime/base/saferead.c",
        "old": "                long rest = read_mapped((char *)dst + done, (uintptr_t)src + done, n - done);",
        "new": "                long rest = -1;",
        "tests": ["tests/runtime/test_calls_unread.py::"
                  "test_where_the_kernel_refuses_process_vm_readv_a_mapped_page_is_still_read"],
        "why": "under qemu-user or a seccomp filter the captures and structs are still read",
    },
    {
        "name": "saferead-own-stack-never-read-directly",
        "file": "runtime/base/saferead.c",
        "old": "    if (on_own_stack((uintptr_t)src, n)) {",
        "new": "    if (0 && on_own_stack((uintptr_t)src, n)) {",
        "tests": ["tests/runtime/test_calls_stack.py::test_only_the_threads_own_stack_is_read_directly[main]",
                  "tests/runtime/test_calls_stack.py::test_only_the_threads_own_stack_is_read_directly[thread]"],
        "why": "a capture on the calling thread's own stack is read without a system call",
    },
    {
        "name": "saferead-own-stack-below-the-stack-pointer",
        "file": "runtime/base/saferead.c",
        "old": "stack_lo && sp < stack_hi && src >= sp && src < stack_hi &&",
        "new": "stack_lo && sp < stack_hi && src >= stack_lo && src < stack_hi &&",
        "tests": ["tests/runtime/test_calls_stack.py::test_only_the_threads_own_stack_is_read_directly[below]"],
        "why": "the direct read is of the live stack only, at or above the stack pointer",
    },
    {
        "name": "saferead-own-stack-past-its-end",
        "file": "runtime/base/saferead.c",
        "old": "           n <= stack_hi - src;",
        "new": "           n <= stack_hi;",
        "tests": ["tests/runtime/test_calls_stack.py::test_only_the_threads_own_stack_is_read_directly[top]"],
        "why": "a direct read never runs past the end of the thread's stack",
    },
    {
        "name": "saferead-own-stack-any-mapping-with-a-guard",
        "file": "runtime/base/saferead.c",
        "old": "    if (tp && tp > sp && tp < hi && below == lo && was_guard) {",
        "new": "    if (tp && below == lo && was_guard) {",
        "tests": ["tests/runtime/test_calls_stack.py::test_only_the_threads_own_stack_is_read_directly[coroutine]"],
        "why": "a stack of the program's own (a coroutine's) is never taken for the thread's",
    },
    {
        "name": "saferead-own-stack-first-threads-descriptor",
        "file": "runtime/base/saferead.c",
        "old": "    uintptr_t tp = gettid() == getpid() ? 0 : (uintptr_t)pthread_self(), end = 0;",
        "new": "    uintptr_t tp = (uintptr_t)pthread_self(), end = 0;",
        "tests": ["tests/runtime/test_calls_stack.py::test_only_the_threads_own_stack_is_read_directly[maincoro]"],
        "why": "the first thread's descriptor, in the loader's memory, never marks a stack",
    },
    {
        "name": "saferead-own-stack-pointer-elsewhere",
        "file": "runtime/base/saferead.c",
        "old": "    return st == 2 && sp >= stack_lo && sp < stack_hi &&",
        "new": "    return st == 2 && sp < stack_hi &&",
        "tests": ["tests/runtime/test_calls_stack.py::test_only_the_threads_own_stack_is_read_directly[switched]"],
        "why": "the direct read applies only while the thread runs on the stack it found",
    },
    {
        "name": "attribute-hook-reads-the-answer-of-a-failed-call",
        "file": "runtime/hooks/hooks_attributes.c",
        "old": "    int driver_value = answered ? *value : 0;\n",
        "new": "    int driver_value = value ? *value : 0;\n",
        "tests": ["tests/runtime/test_badpointers.py::test_bad_pointers_to_the_real_driver_end_as_without_the_shim[attrs]"],
        "why": "the attribute hook never reads the answer of a call that failed",
    },
    {
        "name": "ledger-numbers-left-out-of-the-header",
        "file": "runtime/memory/ledger.c",
        "old": "    num = to;\n",
        "new": "    (void)to;\n",
        "tests": ["tests/run/test_memory.py::test_every_route_accounted_as_the_fake_counts"],
        "why": "the ledger's numbers live in the trace file's header once it is attached",
    },
    {
        "name": "ledger-fast-path-forgets-the-table-may-be-unmapped",
        "file": "runtime/memory/entries.c",
        "old": "    int i = room ? free_slot(tag, key) : -1;\n",
        "new": "    int i = free_slot(tag, key);\n",
        "tests": ["tests/run/test_memory.py::test_every_route_accounted_as_the_fake_counts"],
        "why": "an allocation's common path leaves the table's mapping (and a full table) to "
               "the general one",
    },
    {
        "name": "ledger-one-device-asked-anyway",
        "file": "runtime/memory/hooks_memory.c",
        "old": "    if (__builtin_expect(__atomic_load_n(&devices, __ATOMIC_RELAXED) == 1, 1))\n",
        "new": "    if (__builtin_expect(__atomic_load_n(&devices, __ATOMIC_RELAXED) == -1, 1))\n",
        "tests": ["tests/run/test_memory.py::test_one_device_is_device_0_without_asking"],
        "why": "with one device an allocation is device 0's without a cuCtxGetDevice",
    },
    {
        "name": "ledger-any-device-count-taken-for-one",
        "file": "runtime/memory/hooks_memory.c",
        "old": "        __atomic_store_n(&devices, n, __ATOMIC_RELAXED);\n",
        "new": "        __atomic_store_n(&devices, 1, __ATOMIC_RELAXED);\n",
        "tests": ["tests/run/test_memory.py::test_every_route_accounted_as_the_fake_counts"],
        "why": "with several devices each allocation's device is asked",
    },
    {
        "name": "ledger-free-given-back-before-the-driver-freed",
        "file": "runtime/memory/routes.h",
        "old": "    int took = shimgen_ledger_take((tag), (uint64_t)(key), taken);                          \\\n",
        "new": "    int took = shimgen_ledger_take((tag), (uint64_t)(key), taken);                          \\\n"
               "    shimgen_ledger_given(took, taken), took = 0;                                            \\\n",
        "tests": ["tests/run/test_memory_race.py::"
                  "test_the_limit_holds_at_the_driver_under_threads_and_forks"],
        "why": "a free's bytes are given back only once the driver freed them: the limit holds "
               "at the driver under racing threads",
    },
    {
        "name": "ledger-pitch-checked-unpadded",
        "file": "runtime/memory/routes.h",
        "old": "              times(padded_row(col, w), h), LEDGER_ADDR,                                    \\\n",
        "new": "              times(w, h), LEDGER_ADDR,                                    \\\n",
        "tests": ["tests/run/test_memory_race.py::test_pitched_rows_are_checked_padded"],
        "why": "a pitched allocation is checked with its rows padded before it reaches the "
               "driver",
    },
    {
        "name": "ledger-pitch-past-the-bound-kept",
        "file": "runtime/memory/routes.h",
        "old": "            if (!shimgen_ledger_grow(col, held_back, size)) {                               \\\n",
        "new": "            if (0) {                               \\\n",
        "tests": ["tests/run/test_memory_race.py::"
                  "test_a_pitch_past_what_the_device_says_is_refused_after_the_fact"],
        "why": "an allocation the driver made larger than its bound, past the limit, is given "
               "back and refused",
    },
    {
        "name": "ledger-array-zero-height-counted-zero",
        "file": "runtime/memory/hooks_memory.c",
        "old": "    return times(row, times(ext[1] ? ext[1] : 1, ext[2] ? ext[2] : 1));\n",
        "new": "    return times(row, times(ext[1], ext[2] ? ext[2] : 1));\n",
        "tests": ["tests/run/test_memory_race.py::"
                  "test_arrays_are_checked_padded_and_a_zero_height_is_one_row"],
        "why": "a 1-D array's height 0 is one row",
    },
    {
        "name": "ledger-array-rows-unpadded",
        "file": "runtime/memory/hooks_memory.c",
        "old": "    uint64_t row = padded_row(col, times(ext[0], times(element, channels)));\n",
        "new": "    uint64_t row = times(ext[0], times(element, channels)) + 0 * (uint64_t)col;\n",
        "tests": ["tests/run/test_memory_race.py::"
                  "test_arrays_are_checked_padded_and_a_zero_height_is_one_row"],
        "why": "an array is checked with its rows padded as the device pads them",
    },
    {
        "name": "ledger-info-more-free-than-the-device",
        "file": "runtime/memory/routes.h",
        "old": "            *free = left < *free ? left : *free;                                            \\\n",
        "new": "            *free = left;                                            \\\n",
        "tests": ["tests/run/test_memory_race.py::test_info_never_more_free_than_the_device_has"],
        "why": "under a limit cuMemGetInfo_v2 never says more free than the device has",
    },
    {
        "name": "ledger-limit-past-the-largest-size-taken",
        "file": "runtime/memory/ledger.c",
        "old": "        if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, *s - '0', &n) ||\n"
               "            n > SHIMGEN_SIZE_MAX)\n",
        "new": "        if ((n = n * 10 + (uint64_t)(*s - '0'), 0))\n",
        "tests": ["tests/run/test_memory_race.py::"
                  "test_a_limit_past_any_size_is_refused_as_the_cli_refuses_it"],
        "why": "a limit past 2^64 - 1 bytes is none: refused as --limit refuses it",
    },
    {
        "name": "limit-cli-huge-digits-to-int",
        "file": "shimgen/run/limits.py",
        "old": "    if len(text[:digits].lstrip(\"0\")) > len(str(SIZE_MAX)):\n",
        "new": "    if False:\n",
        "tests": ["tests/run/test_memory_race.py::test_the_largest_size_is_taken_by_both"],
        "why": "a size of thousands of digits is one line, never int()'s own error",
    },
    # ---- one memory budget for many processes (runtime/budget/, shimgen/run/group.py) ----
    {
        "name": "budget-refusal-ignored",
        "file": "runtime/memory/ledger.c",
        "old": "    if (!shimgen_budget_take(column, size, 1)) {\n",
        "new": "    if (!shimgen_budget_take(column, size, 1) && 0) {\n",
        "tests": ["tests/run/test_budget.py::test_a_job_never_takes_the_driver_past_its_budget"],
        "why": "an allocation the shared budget refuses never reaches the driver",
    },
    {
        "name": "budget-dead-slot-kept",
        "file": "runtime/budget/budget.c",
        "old": "        if ((int)i != mine && s->pid > 0 && books_slot_dead(books_fd, books, i, my_ns)) {\n",
        "new": "        if ((int)i != mine && s->pid > 0 && 0 && books_slot_dead(books_fd, books, i, my_ns)) {\n",
        "tests": ["tests/run/test_budget.py::test_a_process_killed_holding_memory_gives_it_back"],
        "why": "a process killed holding memory gives it back to the next process short of it",
    },
    {
        "name": "budget-zombie-counted-alive",
        "file": "runtime/budget/view.h",
        "old": "    return !start || zombie || start != s->start;\n",
        "new": "    return !start || start != s->start + 0 * (uint64_t)zombie;\n",
        "tests": ["tests/run/test_budget.py::test_a_process_killed_holding_memory_gives_it_back[False]"],
        "why": "a killed process its parent has not reaped (a zombie) has given its memory back",
    },
    {
        "name": "budget-dead-holder-not-repaired",
        "file": "runtime/budget/budget.c",
        "old": "            make_odd();\n            repair();\n            return 1;\n",
        "new": "            make_odd();\n            return 1;\n",
        "tests": ["tests/run/test_budget.py::test_a_process_killed_holding_the_lock_blocks_nobody"],
        "why": "what a process killed holding the books' lock left half-done is repaired by the next holder",
    },
    {
        "name": "budget-dead-holder-not-taken-over",
        "file": "runtime/budget/budget.c",
        "old": "            books_slot_dead(books_fd, books, (unsigned)holder, my_ns) &&\n",
        "new": "            0 && books_slot_dead(books_fd, books, (unsigned)holder, my_ns) &&\n",
        "tests": ["tests/run/test_budget.py::test_a_process_killed_holding_the_lock_blocks_nobody"],
        "why": "a process killed holding the books' lock blocks nobody: its death is found and the lock taken over",
    },
    {
        "name": "budget-own-limit-refusal-keeps-the-budget",
        "file": "runtime/memory/ledger.c",
        "old": "    if (!fits && shared)\n        shimgen_budget_give(column, size);\n",
        "new": "",
        "tests": ["tests/run/test_budget.py::test_a_limit_of_its_own_and_the_budget_together"],
        "why": "an allocation the process's own limit refuses gives back what it took of the shared budget",
    },
    {
        "name": "budget-free-not-given-back",
        "file": "runtime/memory/entries.c",
        "old": "        recompute_extra((unsigned)taken[1]);\n    unlock_ledger();\n    give_shared((unsigned)taken[1], taken[0]);\n",
        "new": "        recompute_extra((unsigned)taken[1]);\n    unlock_ledger();\n",
        "tests": ["tests/run/test_budget.py::test_a_job_never_takes_the_driver_past_its_budget"],
        "why": "a free gives its bytes back to the shared budget: the books stay equal to the driver's",
    },
    {
        "name": "budget-settle-gives-the-whole-reservation-back",
        "file": "runtime/memory/entries.c",
        "old": "    uint64_t back = META_TAG(meta) ? reserved - size : reserved;\n",
        "new": "    uint64_t back = reserved;\n",
        "tests": ["tests/run/test_budget.py::test_a_job_never_takes_the_driver_past_its_budget"],
        "why": "an allocation the driver made keeps its bytes in the shared budget",
    },
    {
        "name": "budget-device-uuid-ignored",
        "file": "runtime/budget/budget.c",
        "old": "    if (REAL(cuDeviceGet, int *, int)(&dev, column) != SHIMGEN_CUDA_SUCCESS ||\n",
        "new": "    if (1 || REAL(cuDeviceGet, int *, int)(&dev, column) != SHIMGEN_CUDA_SUCCESS ||\n",
        "tests": ["tests/run/test_budget.py::test_two_runs_share_a_budget_and_devices_are_keyed_by_uuid"],
        "why": "a device's budget is keyed by its UUID, the same device whatever its ordinal in a process",
    },
    {
        "name": "budget-books-size-unchecked",
        "file": "runtime/budget/budget.c",
        "old": "        (st.st_mode & 077) || (uint64_t)st.st_size != sizeof *books) {\n",
        "new": "        (st.st_mode & 077)) {\n",
        "tests": ["tests/run/test_budget.py::test_books_of_another_kind_are_refused_in_one_line"],
        "why": "a file too short for the books is refused before it is mapped (no SIGBUS past its end)",
    },
    {
        "name": "budget-view-counts-the-dead",
        "file": "runtime/budget/view.h",
        "old": "            if (b->slot[i].pid <= 0 || books_slot_dead(fd, b, i, ns))\n",
        "new": "            if (b->slot[i].pid <= 0 || (books_slot_dead(fd, b, i, ns) && 0))\n",
        "tests": ["tests/run/test_budget.py::test_the_view_shows_the_live_processes"],
        "why": "the read-only view shows live processes alone, their bytes summed",
    },
    {
        "name": "budget-forked-child-in-the-parents-slot",
        "file": "runtime/load/fork.c",
        "old": "    shimgen_budget_after_fork();\n",
        "new": "",
        "tests": ["tests/run/test_budget.py::test_a_forked_child_has_a_slot_of_its_own"],
        "why": "a forked child's allocations are its own slot's, so that its death gives back its own",
    },
    {
        "name": "budget-group-other-size-taken",
        "file": "shimgen/run/group.py",
        "old": "    if size is not None and size != fixed:\n",
        "new": "    if False:\n",
        "tests": ["tests/run/test_budget_run.py::test_a_group_is_fixed_by_its_first_run"],
        "why": "a run that gives a group another size than its first run's is refused in one line",
    },
    {
        "name": "budget-group-dir-open-to-others",
        "file": "shimgen/run/group.py",
        "old": "    why = distrust(os.fstat(fd))\n",
        "new": "    why = \"\"\n",
        "tests": ["tests/run/test_budget_run.py::test_a_group_nobody_else_may_write_or_a_bad_name"],
        "why": "a group directory others can write is refused (they could swap the books)",
    },
    {
        "name": "ledger-program-struct-read-unsafely",
        "file": "runtime/memory/hooks_memory.c",
        "old": "    return src && shimgen_safe_read(dst, src, n) == (long)n;\n",
        "new": "    return src && memcpy(dst, src, n);\n",
        "tests": ["tests/run/test_memory_race.py::"
                  "test_unreadable_structs_are_the_drivers_to_answer"],
        "why": "a prop or array descriptor the program passes is read without faulting",
    },
    {
        "name": "top-device-memory-counts-pinned-host",
        "file": "shimgen/trace/inflight.py",
        "old": "    return sum(held[:MEM_HOST_COLUMN * MEM_ROUTES]) & (2**64 - 1)\n",
        "new": "    return sum(held) & (2**64 - 1)\n",
        "tests": ["tests/run/test_memory.py::test_sigkill_leaves_the_numbers_at_death"],
        "why": "top's device memory is the devices' columns of the ledger, not pinned host memory",
    },
    {
        "name": "mutants-restore-forgets-mtime",
        "file": "devtools/mutants.py",
        "old": "        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))\n",
        "new": "",
        "tests": ["tests/devtools/test_mutants.py::test_mutations_at_once_each_in_a_copy_give_the_same_verdicts_in_the_list_order"],
        "why": "a restored file keeps its modification time, so the shims built for the "
               "unmutated sources are taken again",
    },
    {
        "name": "mutants-leaves-hung-programs-running",
        "file": "devtools/mutants.py",
        "old": "    finally:\n        reap(scratch, proc)\n",
        "new": "    finally:\n        pass\n",
        "tests": ["tests/devtools/test_mutants.py::test_what_the_tests_leave_running_in_the_copy_is_killed"],
        "why": "a program a mistake made hang must not take a core from the mutations after it",
    },
    {
        "name": "mutants-reaps-outside-its-copies",
        "file": "devtools/mutants.py",
        "old": "    ours = root in COPIES\n",
        "new": "    ours = True\n",
        "tests": ["tests/devtools/test_mutants.py::test_nothing_outside_the_checks_copies_is_killed"],
        "why": "a pytest run in the repository itself (the suite's own check of the tiers) "
               "would kill every process working there: the suite, its workers, CI",
    },
    {
        "name": "mutants-broken-says-not-why",
        "file": "devtools/mutants.py",
        "old": "                                  + (f\" ({why.strip()[:300]})\" if why and not line else \"\"))\n",
        "new": "                                  + \"\")\n",
        "tests": ["tests/devtools/test_mutants.py::test_tests_that_fail_unmutated_and_code_that_does_not_build_are_broken"],
        "why": "an entry broken by a test that fails anyway must say how it failed: CI's log "
               "is all there is to tell a flaky test from a real one",
    },
]
