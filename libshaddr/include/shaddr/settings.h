/* SPDX-License-Identifier: MIT */
/*
 * libshaddr C API: the settings (SHADDR_* environment variables and the others the project
 * documents), as declared in one place in the library. `shaddr-info --settings` prints them;
 * The table in docs/settings.md is printed from them.
 */
#ifndef SHADDR_SETTINGS_H
#define SHADDR_SETTINGS_H

#include <stdint.h>

#include "shaddr/shaddr.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * struct shaddr_setting_desc - one setting's declaration
 * @name: the variable (or module parameter, CVAR, ...)
 * @kind: where it is set: "env", "env / tuning file", "module parameter", ...
 * @type: "size", "integer", "boolean", "choice", "text"; "" when libshaddr does not read it
 * @choices: for "choice", the accepted words, space-separated
 * @min_value, @max_value: for "size" and "integer", the accepted range
 * @default_value: the default, as documented
 * @scope: "per rank", "equal on the node" (refused by every rank of a node communicator when
 *         ranks differ), "equal in the job" (the interposer's: refused at MPI_Init); ""
 *         when libshaddr does not read it
 * @reader: "libshaddr", "interposer", or "" (a tool, a test, the module or MPICH)
 * @doc: one line of documentation (Markdown)
 */
struct shaddr_setting_desc {
	const char *name;
	const char *kind;
	const char *type;
	const char *choices;
	uint64_t min_value;
	uint64_t max_value;
	const char *default_value;
	const char *scope;
	const char *reader;
	const char *doc;
};

/**
 * shaddr_setting_describe() - the @index-th declared setting
 * Return: 0; -ENOENT past the last one; -EINVAL for a NULL @out.
 */
SHADDR_API int shaddr_setting_describe(unsigned index, struct shaddr_setting_desc *out);

/** shaddr_verbose() - 1 if SHADDR_VERBOSE is on, else 0 (a value that does not parse is
 * reported once on stderr and counts as off). */
SHADDR_API int shaddr_verbose(void);

#ifdef __cplusplus
}
#endif

#endif /* SHADDR_SETTINGS_H */
