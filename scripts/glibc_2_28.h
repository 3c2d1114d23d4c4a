/* Forced into every compile of scripts/build_wheel_manylinux.sh (its compiler wrappers
 * pass -include): the five libm functions to which glibc 2.29 gave new versions are
 * bound to their GLIBC_2.2.5 versions, which glibc 2.28 has and every later glibc still
 * exports (the same results; only the SVID error path, matherr, differs). Without it a
 * call compiled against the Debian 11 sysroot's glibc 2.31 headers asks for
 * GLIBC_2.29, past manylinux_2_28. The prebuilt Debian 11 libraries the wheel vendors
 * get the same by scripts/glibc_compat_versions.py. */
#if defined(__x86_64__) && defined(__linux__)
__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver exp2,exp2@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
__asm__(".symver log2,log2@GLIBC_2.2.5");
__asm__(".symver pow,pow@GLIBC_2.2.5");
#endif
