// SPDX-License-Identifier: GPL-2.0
/*
 * Per-user bound on what windows and attachments may map, across all the
 * user's open files and processes, as pipe buffers are bounded per user:
 * the module parameter max_user_map_mib. Each mapping charges its size to
 * the real uid of the task that made it, before anything sized by it is
 * allocated, and uncharges it when it is retired. struct user_struct has
 * no room for a module's counter, so the module keeps its own, per uid,
 * for as long as the uid has something charged.
 */
#include <linux/cred.h>
#include <linux/hashtable.h>
#include <linux/slab.h>
#include <linux/spinlock.h>

#include "shaddr_priv.h"

struct shaddr_user {
	struct hlist_node node;
	kuid_t uid;
	unsigned long bytes;
};

static DEFINE_HASHTABLE(shaddr_users, 6);
static DEFINE_SPINLOCK(shaddr_users_lock);

static struct shaddr_user *shaddr_user_find(kuid_t uid)
{
	struct shaddr_user *u;

	lockdep_assert_held(&shaddr_users_lock);
	hash_for_each_possible(shaddr_users, u, node, __kuid_val(uid))
		if (uid_eq(u->uid, uid))
			return u;
	return NULL;
}

static bool shaddr_user_fits(struct shaddr_user *u, unsigned long bytes)
{
	unsigned long total = u->bytes + bytes;

	return total >= u->bytes && (total >> 20) <= shaddr_max_user_map_mib;
}

/**
 * shaddr_user_charge() - charge @bytes of mappings to the caller's real uid
 * @bytes: size of the new mapping
 *
 * Return: the user charged (pass it to shaddr_user_uncharge()), or
 * ERR_PTR(-ENOMEM) when the user would exceed max_user_map_mib (or memory
 * is short).
 */
struct shaddr_user *shaddr_user_charge(unsigned long bytes)
{
	kuid_t uid = current_uid();
	struct shaddr_user *u, *new = NULL;

	for (;;) {
		spin_lock(&shaddr_users_lock);
		u = shaddr_user_find(uid);
		if (!u && new) {
			u = new;
			new = NULL;
			hash_add(shaddr_users, &u->node, __kuid_val(uid));
		}
		if (u) {
			if (!shaddr_user_fits(u, bytes)) {
				/* A fresh entry fails only for a huge @bytes. */
				if (!u->bytes) {
					hash_del(&u->node);
					kfree(u);
				}
				u = ERR_PTR(-ENOMEM);
			} else {
				u->bytes += bytes;
			}
			spin_unlock(&shaddr_users_lock);
			kfree(new);
			return u;
		}
		spin_unlock(&shaddr_users_lock);
		new = kzalloc(sizeof(*new), GFP_KERNEL);
		if (!new)
			return ERR_PTR(-ENOMEM);
		new->uid = uid;
	}
}

/* Give back what shaddr_user_charge() took; the last byte frees the user. */
void shaddr_user_uncharge(struct shaddr_user *u, unsigned long bytes)
{
	spin_lock(&shaddr_users_lock);
	WARN_ON_ONCE(u->bytes < bytes);
	u->bytes -= bytes;
	if (!u->bytes) {
		hash_del(&u->node);
		kfree(u);
	}
	spin_unlock(&shaddr_users_lock);
}
