<?php
/**
 * Laravel 8.83's own database queue, timed inside PHP, for bench/bench_laravel.py.
 *
 *   php bench/php/laravel_queue_bench.php migrate  CONN
 *   php bench/php/laravel_queue_bench.php dispatch CONN N
 *   php bench/php/laravel_queue_bench.php work     CONN N
 *
 * CONN is one JSON object: {"driver":"sqlite","database":"/path.db"} or
 * {"driver":"pgsql"|"mysql","host":"127.0.0.1","port":N,"database":"x","username":"u",
 * "password":""}; for SQLite an optional "synchronous" ("FULL", "NORMAL", ...) is set with
 * PRAGMA on connect (Laravel 8 has no such option; without it SQLite's default stays).
 *
 * The app is what Laravel's service providers would register for a `database` queue
 * (Debian's Laravel under /usr/share/php): Illuminate's Container as the global app,
 * the events Dispatcher, the Database capsule (connection 'default'), the Queue capsule
 * (connection 'database': driver database, table jobs, queue default, retry_after 90),
 * the Bus dispatcher, an ExceptionHandler, DatabaseUuidFailedJobProvider as
 * 'queue.failer', an array cache for the worker's restart signal, and
 * Illuminate\Queue\Worker as QueueServiceProvider::registerWorker makes it.
 *
 *   migrate   creates jobs and failed_jobs from Laravel 8.83's stubs (queue:table,
 *             queue:failed-table), if missing.
 *   dispatch  N x App\Jobs\Noop::dispatch($i, "job-$i") — PendingDispatch -> Bus
 *             Dispatcher -> DatabaseQueue::push, one INSERT (autocommit) each — timed.
 *   work      Worker::daemon('database', 'default', WorkerOptions(sleep 0, tries 1,
 *             stopWhenEmpty)), as `php artisan queue:work --stop-when-empty --sleep=0`
 *             does, but with no console line per job; timed. Noop::handle() only counts.
 *
 * Timing starts after boot and after a first query (the connection is open and the
 * table's pages were read once, `Queue::size()`) and stops when the loop returns.
 * One JSON line on stdout: {"op","n","seconds","handled","reported","failed_events",
 * "size_before","php","opcache"}.
 */

declare(strict_types=1);

namespace {
    error_reporting(E_ALL & ~E_DEPRECATED);
    date_default_timezone_set('UTC');
    require '/usr/share/php/Illuminate/autoload.php';
    require_once '/usr/share/php/Carbon/autoload.php';
}

namespace App\Jobs {

    use Illuminate\Bus\Queueable;
    use Illuminate\Contracts\Queue\ShouldQueue;
    use Illuminate\Foundation\Bus\Dispatchable;
    use Illuminate\Queue\InteractsWithQueue;
    use Illuminate\Queue\SerializesModels;

    /** What `php artisan make:job Noop` writes, with two small properties. */
    class Noop implements ShouldQueue
    {
        use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

        public static int $handled = 0;

        public function __construct(public int $id, public string $name)
        {
        }

        public function handle(): void
        {
            self::$handled++;
        }
    }
}

namespace {

    use App\Jobs\Noop;
    use Illuminate\Bus\Dispatcher as BusDispatcher;
    use Illuminate\Cache\ArrayStore;
    use Illuminate\Cache\Repository as CacheRepository;
    use Illuminate\Container\Container;
    use Illuminate\Contracts\Debug\ExceptionHandler;
    use Illuminate\Database\Capsule\Manager as DB;
    use Illuminate\Events\Dispatcher as EventDispatcher;
    use Illuminate\Queue\Capsule\Manager as QueueCapsule;
    use Illuminate\Queue\Events\JobFailed;
    use Illuminate\Queue\Failed\DatabaseUuidFailedJobProvider;
    use Illuminate\Queue\Worker;
    use Illuminate\Queue\WorkerOptions;
    use Illuminate\Support\Facades\Facade;

    const QUEUE_CONNECTION = 'database';

    /** Counts reports and writes them to stderr (an app's handler would log them). */
    class CountingExceptionHandler implements ExceptionHandler
    {
        public int $reported = 0;

        public function report(Throwable $e)
        {
            $this->reported++;
            fwrite(STDERR, sprintf("[report] %s: %s at %s:%d\n", get_class($e), $e->getMessage(),
                $e->getFile(), $e->getLine()));
        }

        public function shouldReport(Throwable $e)
        {
            return true;
        }

        public function render($request, Throwable $e)
        {
            throw $e;
        }

        public function renderForConsole($output, Throwable $e)
        {
            $this->report($e);
        }
    }

    function fail_usage(string $message): never
    {
        fwrite(STDERR, $message . "\n");
        exit(2);
    }

    /** Laravel's default config/database.php entry for the driver, overridden by CONN. */
    function db_config(array $conn): array
    {
        $defaults = match ($conn['driver'] ?? null) {
            'sqlite' => ['prefix' => '', 'foreign_key_constraints' => true],
            'pgsql' => ['host' => '127.0.0.1', 'port' => 5432, 'username' => '', 'password' => '',
                'charset' => 'utf8', 'prefix' => '', 'prefix_indexes' => true, 'schema' => 'public',
                'sslmode' => 'prefer'],
            'mysql' => ['host' => '127.0.0.1', 'port' => 3306, 'username' => '', 'password' => '',
                'unix_socket' => '', 'charset' => 'utf8mb4', 'collation' => 'utf8mb4_unicode_ci',
                'prefix' => '', 'prefix_indexes' => true, 'strict' => true, 'engine' => null],
            default => fail_usage('CONN needs a driver: sqlite, pgsql or mysql'),
        };
        unset($conn['synchronous']);
        $config = array_merge($defaults, $conn);
        if ($config['driver'] === 'sqlite' && ! file_exists($config['database'])) {
            touch($config['database']);  // Laravel's SQLiteConnector refuses a missing file
        }
        return $config;
    }

    function boot(array $conn): Container
    {
        $container = new Container;
        Container::setInstance($container);
        Facade::setFacadeApplication($container);
        $container->instance(Illuminate\Contracts\Container\Container::class, $container);

        $events = new EventDispatcher($container);
        $container->instance('events', $events);
        $container->instance(Illuminate\Contracts\Events\Dispatcher::class, $events);

        $db = new DB($container);
        $db->addConnection(db_config($conn), 'default');
        $db->setEventDispatcher($events);
        $db->setAsGlobal();
        $container->instance('db', $db->getDatabaseManager());
        $container->instance(Illuminate\Database\ConnectionResolverInterface::class,
            $db->getDatabaseManager());
        if (($conn['driver'] === 'sqlite') && isset($conn['synchronous'])) {
            $mode = strtoupper((string) $conn['synchronous']);
            if (! in_array($mode, ['OFF', 'NORMAL', 'FULL', 'EXTRA'], true)) {
                fail_usage("bad synchronous {$mode}");
            }
            DB::connection('default')->getPdo()->exec("PRAGMA synchronous = {$mode}");
        }

        $cache = new CacheRepository(new ArrayStore);
        $container->instance('cache.store', $cache);
        $container->instance(Illuminate\Contracts\Cache\Repository::class, $cache);

        $queue = new QueueCapsule($container);
        $queue->addConnection(['driver' => 'database', 'table' => 'jobs', 'queue' => 'default',
            'retry_after' => 90, 'after_commit' => false], QUEUE_CONNECTION);
        $container['config']['queue.default'] = QUEUE_CONNECTION;
        $manager = $queue->getQueueManager();
        $container->instance('queue', $manager);
        $container->instance(Illuminate\Contracts\Queue\Factory::class, $manager);
        $container->instance(Illuminate\Contracts\Queue\Monitor::class, $manager);
        $container->instance('queue.failer',
            new DatabaseUuidFailedJobProvider($container['db'], 'default', 'failed_jobs'));

        $bus = new BusDispatcher($container, function ($connection = null) use ($container) {
            return $container[Illuminate\Contracts\Queue\Factory::class]->connection($connection);
        });
        $container->instance(BusDispatcher::class, $bus);
        $container->instance(Illuminate\Contracts\Bus\Dispatcher::class, $bus);
        $container->instance(Illuminate\Contracts\Bus\QueueingDispatcher::class, $bus);

        $container->instance(ExceptionHandler::class, new CountingExceptionHandler);

        // QueueServiceProvider::registerWorker (no maintenance mode).
        $container->singleton('queue.worker', function ($app) {
            return new Worker($app['queue'], $app['events'], $app[ExceptionHandler::class],
                fn () => false,
                function () use ($app) {
                    $app->forgetScopedInstances();
                    return Facade::clearResolvedInstances();
                });
        });
        return $container;
    }

    function migrate(): void
    {
        $schema = DB::schema();
        // Laravel 8.83's Illuminate/Queue/Console/stubs/jobs.stub
        if (! $schema->hasTable('jobs')) {
            $schema->create('jobs', function ($table) {
                $table->bigIncrements('id');
                $table->string('queue')->index();
                $table->longText('payload');
                $table->unsignedTinyInteger('attempts');
                $table->unsignedInteger('reserved_at')->nullable();
                $table->unsignedInteger('available_at');
                $table->unsignedInteger('created_at');
            });
        }
        // Laravel 8.83's Illuminate/Queue/Console/stubs/failed_jobs.stub
        if (! $schema->hasTable('failed_jobs')) {
            $schema->create('failed_jobs', function ($table) {
                $table->id();
                $table->string('uuid')->unique();
                $table->text('connection');
                $table->text('queue');
                $table->longText('payload');
                $table->longText('exception');
                $table->timestamp('failed_at')->useCurrent();
            });
        }
    }

    function opcache_state(): array
    {
        $status = function_exists('opcache_get_status') ? @opcache_get_status(false) : false;
        return [
            'enable_cli' => (bool) ini_get('opcache.enable_cli'),
            'active' => is_array($status) && ($status['opcache_enabled'] ?? false),
            'jit' => is_array($status) && ($status['jit']['on'] ?? false),
        ];
    }

    function main(array $argv): int
    {
        [$op, $connJson] = [$argv[1] ?? '', $argv[2] ?? ''];
        $conn = json_decode($connJson, true);
        if (! is_array($conn)) {
            fail_usage('usage: laravel_queue_bench.php migrate|dispatch|work CONN [N]');
        }
        $container = boot($conn);
        if ($op === 'migrate') {
            migrate();
            echo json_encode(['op' => 'migrate']), "\n";
            return 0;
        }
        $n = (int) ($argv[3] ?? 0);
        if ($n <= 0 || ! in_array($op, ['dispatch', 'work'], true)) {
            fail_usage('usage: laravel_queue_bench.php migrate|dispatch|work CONN N (N > 0)');
        }
        $handler = $container[ExceptionHandler::class];
        $failedEvents = 0;
        // WorkCommand::listenForEvents' failure logging (its console lines are left out).
        $container['events']->listen(JobFailed::class,
            function ($event) use ($container, &$failedEvents) {
                $failedEvents++;
                $container['queue.failer']->log($event->connectionName, $event->job->getQueue(),
                    $event->job->getRawBody(), $event->exception);
            });

        // Open the connection and read the table once before the clock starts.
        $sizeBefore = $container['queue']->connection(QUEUE_CONNECTION)->size('default');

        if ($op === 'dispatch') {
            $t0 = hrtime(true);
            for ($i = 0; $i < $n; $i++) {
                Noop::dispatch($i, "job-{$i}");  // PendingDispatch::__destruct dispatches
            }
            $seconds = (hrtime(true) - $t0) / 1e9;
        } else {
            // WorkCommand::gatherWorkerOptions for --stop-when-empty --sleep=0 (other defaults).
            $options = new WorkerOptions('default', 0, 128, 60, 0, 1, false, true, 0, 0, 0);
            $worker = $container['queue.worker']->setName('default')
                ->setCache($container[Illuminate\Contracts\Cache\Repository::class]);
            $t0 = hrtime(true);
            $worker->daemon(QUEUE_CONNECTION, 'default', $options);
            $seconds = (hrtime(true) - $t0) / 1e9;
        }
        echo json_encode([
            'op' => $op,
            'n' => $n,
            'seconds' => $seconds,
            'handled' => Noop::$handled,
            'reported' => $handler->reported,
            'failed_events' => $failedEvents,
            'size_before' => (int) $sizeBefore,
            'php' => PHP_VERSION,
            'laravel' => Illuminate\Foundation\Application::VERSION,
            'opcache' => opcache_state(),
        ]), "\n";
        return 0;
    }

    exit(main($argv));
}
