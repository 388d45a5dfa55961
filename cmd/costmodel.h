/* cmd/costmodel.h -- what the files of moe-costmodel share: the program name, the topology
 * lookup (file or preset name) and the subcommand entry points defined outside
 * cmd/moe-costmodel.c. */
#ifndef MOE_CMD_COSTMODEL_H
#define MOE_CMD_COSTMODEL_H

#include "moe/topo.h"

/* "moe-costmodel", for messages. */
extern const char *const costmodel_prog;

/* Read the topology `arg`: a moe-topology(5) file, or the name of a preset (with or without
 * ".topo") looked up in $MOEFLOW_TOPOLOGIES and then in the installed topologies directory.
 * Returns 0, or 1 after printing "moe-costmodel: ..." on stderr. */
int costmodel_topology(const char *arg, moe_topo_t *t);

/* moe-costmodel simulate (cmd/costmodel_sim.c): replay a trace on a placement and a topology,
 * bytes and time of every dispatch scheme. argv[0] is "simulate". Returns the exit status. */
int costmodel_simulate(int argc, char **argv);
/* moe-costmodel fit (cmd/costmodel_sim.c): a link class's efficiency curve from an nccl-tests
 * result table, written as a topology. Returns the exit status. */
int costmodel_fit(int argc, char **argv);

#endif
