/* cmd/costmodel.h -- what the files of moe-costmodel share: the program name and the
 * subcommand entry points defined outside cmd/moe-costmodel.c (which calls them, never the
 * other way round). */
#ifndef MOE_CMD_COSTMODEL_H
#define MOE_CMD_COSTMODEL_H

/* The program name, for messages. */
#define COSTMODEL_PROG "moe-costmodel"

/* moe-costmodel simulate (cmd/costmodel_sim.c): replay a trace on a placement and a topology,
 * bytes and time of every dispatch scheme. argv[0] is "simulate". Returns the exit status. */
int costmodel_simulate(int argc, char **argv);
/* moe-costmodel fit (cmd/costmodel_sim.c): a link class's efficiency curve from an nccl-tests
 * result table, written as a topology. Returns the exit status. */
int costmodel_fit(int argc, char **argv);

#endif
