/* startnop: a process that does nothing, to measure what LD_PRELOAD of the shim adds to
 * the start-up of a program that never calls the driver. */
int main(void)
{
    return 0;
}
