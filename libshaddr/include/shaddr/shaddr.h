/* SPDX-License-Identifier: MIT */
/*
 * libshaddr C API: the module (device) part.
 *
 * Conventions of the whole C API: functions return 0 or a negative errno value and never
 * throw; shaddr_last_error() gives a human-readable reason for the calling thread's last
 * failure.
 */
#ifndef SHADDR_SHADDR_H
#define SHADDR_SHADDR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHADDR_API __attribute__((visibility("default")))

/** What the loaded kernel module reports about itself. */
struct shaddr_module_info {
	uint32_t abi_major;  /**< module ABI major; must equal the library's to use the module */
	uint32_t abi_minor;  /**< module ABI minor */
	uint64_t features;   /**< SHADDR_FEAT_* bits of <linux/shaddr.h> */
};

/**
 * shaddr_device_path() - path of the device node: $SHADDR_DEVICE if set, else /dev/shaddr.
 */
SHADDR_API const char *shaddr_device_path(void);

/**
 * shaddr_module_query() - open the device and ask the module for its version and features.
 * @info: filled in on success; must not be NULL.
 *
 * Return: 0; -EINVAL for a NULL @info; -ENOENT when the device node is absent (module not
 * loaded); -EACCES when it cannot be opened; -EPROTO when the module speaks another ABI major
 * (@info is still filled in); -ENOTTY when the file is not a shaddr device; other negative
 * errno values from open(2) or ioctl(2).
 */
SHADDR_API int shaddr_module_query(struct shaddr_module_info *info);

/** Library ABI major the module must match. */
SHADDR_API uint32_t shaddr_abi_major(void);

/** Reason for the calling thread's last failed libshaddr call ("" if none). */
SHADDR_API const char *shaddr_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* SHADDR_SHADDR_H */
