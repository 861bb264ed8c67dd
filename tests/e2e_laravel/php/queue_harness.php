<?php
// Laravel 8.83's REAL queue machinery (Bus dispatcher, DatabaseQueue, Worker, CallQueuedHandler,
// DatabaseUuidFailedJobProvider) without a full Laravel app, on SQLite, PostgreSQL or MariaDB,
// for the interop tests where a Python worker and Laravel's worker share one `jobs` table.
//
// CONN is one JSON argument: {"driver":"sqlite","database":"/path.db"} or
// {"driver":"pgsql"|"mysql","host":"127.0.0.1","port":N,"database":"x","username":"u","password":""}.
// The DB connection is named 'default'; the QUEUE connection is named 'database' (driver database,
// table jobs, queue default, retry_after 90) and is the default queue connection.
//
//   migrate  CONN                      jobs + failed_jobs (Laravel 8.83's stubs) + users; idempotent
//   dispatch CONN APP_KEY [CASE ...]   Bus Dispatcher::dispatch() each case (default: all of
//                                      worker_cases()); one JSON line per case:
//                                      {case,id,uuid,queue,payload,class,props,available_at,created_at}
//   work     CONN APP_KEY [--queue=a,b] [--once] [--stop-when-empty] [--tries=N] [--backoff=N]
//                         [--timeout=N] [--sleep=N] [--max-jobs=N] [--max-time=N] [--memory=N]
//                         [--rest=N] [--name=N] [--force]
//                                      what `php artisan queue:work database …` does; prints
//                                      WorkCommand's status lines (without <info> tags)
//   retry    CONN APP_KEY UUID...|all  what `php artisan queue:retry` does; one JSON line per id
//   failed   CONN                      failed_jobs as `queue:failed` lists them, one JSON line each
//   push-raw CONN QUEUE                pushRaw() the payload read on stdin; prints {"id": N}
//   info     CONN                      {"driver","server_version","lock_for_popping"}
//   dispatch-unique CONN APP_KEY CLASS ARG  dispatch(new App\Things\CLASS(ARG)) with the database
//                                      cache store (cache_locks, prefix laravel_cache), as an
//                                      app whose CACHE_DRIVER=database; {dispatched, id}
//   batch CONN APP_KEY [--allow-failures] LABEL…  Bus::batch() of App\Things\BatchStep(LABEL) jobs
//                                      with then/catch/finally callbacks that log
//                                      {"class":"batch-then"|…}; {batch_id, ids}
//   queue-things CONN APP_KEY [CASE …]  what a Laravel app queues besides jobs, through Laravel's
//                                      own calls: listener (event()), mailable (Mail::to()->queue),
//                                      notification ($user->notify()), closure (dispatch(fn)),
//                                      models (a SerializesModels job: collection + relations); one
//                                      JSON line per case: {case,id,uuid,queue,payload}
//   queue-pause CONN VERB CONNECTION QUEUE [TTL]  Laravel 12.40+'s QueueManager pause/pauseFor/
//                                      resume (VERB: pause, pause-for, resume, is-paused) on the
//                                      database cache store (table cache, prefix laravel_cache);
//                                      {"paused": isPaused()}
//
// Job classes and cases: jobs.php. Their handle() appends a JSON line to $QUEUE_HARNESS_LOG.
error_reporting(E_ALL & ~E_DEPRECATED);
date_default_timezone_set('UTC');
require '/usr/share/php/Illuminate/autoload.php';
require_once '/usr/share/php/Carbon/autoload.php';
require_once __DIR__ . '/jobs.php';
require_once __DIR__ . '/things.php';

use Illuminate\Bus\Dispatcher as BusDispatcher;
use Illuminate\Cache\ArrayStore;
use Illuminate\Cache\Repository as CacheRepository;
use Illuminate\Container\Container;
use Illuminate\Contracts\Debug\ExceptionHandler;
use Illuminate\Database\Capsule\Manager as DB;
use Illuminate\Encryption\Encrypter;
use Illuminate\Events\Dispatcher as EventDispatcher;
use Illuminate\Queue\Capsule\Manager as QueueCapsule;
use Illuminate\Queue\Events\JobFailed;
use Illuminate\Queue\Events\JobProcessed;
use Illuminate\Queue\Events\JobProcessing;
use Illuminate\Queue\Events\JobRetryRequested;
use Illuminate\Queue\Failed\DatabaseUuidFailedJobProvider;
use Illuminate\Queue\Worker;
use Illuminate\Queue\WorkerOptions;
use Illuminate\Support\Carbon;
use Illuminate\Support\Facades\Facade;
use Illuminate\Support\Str;

const QUEUE_CONNECTION = 'database';

/** Reports exceptions on stderr (Laravel's handler would log them). */
class StderrExceptionHandler implements ExceptionHandler
{
    public function report(Throwable $e)
    {
        fwrite(STDERR, sprintf("[report] %s: %s at %s:%d\n", get_class($e), $e->getMessage(),
            $e->getFile(), $e->getLine()));
    }

    public function shouldReport(Throwable $e) { return true; }

    public function render($request, Throwable $e) { throw $e; }

    public function renderForConsole($output, Throwable $e) { $this->report($e); }
}

function fail_usage(string $message): never
{
    fwrite(STDERR, $message . "\n");
    exit(2);
}

function out(array $row): void
{
    echo json_encode($row, \App\Jobs\HARNESS_JSON), "\n";
}

function key_bytes(string $key): string
{
    return str_starts_with($key, 'base64:') ? base64_decode(substr($key, 7)) : $key;
}

/** Laravel's default config/database.php entry for the driver, overridden by CONN. */
function db_config(string $json): array
{
    $conn = json_decode($json, true);
    if (! is_array($conn) || ! isset($conn['driver'])) {
        fail_usage("CONN must be a JSON object with a driver: {$json}");
    }
    $defaults = match ($conn['driver']) {
        'sqlite' => ['prefix' => '', 'foreign_key_constraints' => true],
        'pgsql' => ['host' => '127.0.0.1', 'port' => 5432, 'username' => '', 'password' => '',
            'charset' => 'utf8', 'prefix' => '', 'prefix_indexes' => true, 'schema' => 'public',
            'sslmode' => 'prefer'],
        'mysql' => ['host' => '127.0.0.1', 'port' => 3306, 'username' => '', 'password' => '',
            'unix_socket' => '', 'charset' => 'utf8mb4', 'collation' => 'utf8mb4_unicode_ci',
            'prefix' => '', 'prefix_indexes' => true, 'strict' => true, 'engine' => null],
        default => fail_usage("unsupported driver {$conn['driver']}"),
    };
    $config = array_merge($defaults, $conn);
    if ($config['driver'] === 'sqlite' && $config['database'] !== ':memory:'
        && ! file_exists($config['database'])) {
        touch($config['database']);  // Laravel's SQLiteConnector refuses a missing file
    }
    return $config;
}

/**
 * What Laravel's service providers (database, queue, bus, events, encryption, cache) would
 * register, with the container as the global app.
 */
function boot(string $connJson, ?string $appKey = null): Container
{
    $container = new Container;
    Container::setInstance($container);
    Facade::setFacadeApplication($container);
    $container->instance(Illuminate\Contracts\Container\Container::class, $container);

    $events = new EventDispatcher($container);
    $container->instance('events', $events);
    $container->instance(Illuminate\Contracts\Events\Dispatcher::class, $events);

    $db = new DB($container);
    $db->addConnection(db_config($connJson), 'default');
    $db->setEventDispatcher($events);
    $db->setAsGlobal();
    $db->bootEloquent();
    $container->instance('db', $db->getDatabaseManager());
    $container->instance(Illuminate\Database\ConnectionResolverInterface::class, $db->getDatabaseManager());

    if ($appKey !== null) {
        // EncryptionServiceProvider: queued closures are signed with the app key.
        Laravel\SerializableClosure\SerializableClosure::setSecretKey(key_bytes($appKey));
        $encrypter = new Encrypter(key_bytes($appKey), 'AES-256-CBC');
        $container->instance('encrypter', $encrypter);
        $container->instance(Illuminate\Contracts\Encryption\Encrypter::class, $encrypter);
        $container->instance(Illuminate\Contracts\Encryption\StringEncrypter::class, $encrypter);
    }

    $cache = new CacheRepository(new ArrayStore);
    $container->instance('cache.store', $cache);
    $container->instance(Illuminate\Contracts\Cache\Repository::class, $cache);

    $queue = new QueueCapsule($container);
    $queue->addConnection(['driver' => 'database', 'table' => 'jobs', 'queue' => 'default',
        'retry_after' => 90, 'after_commit' => false], QUEUE_CONNECTION);
    $container['config']['queue.default'] = QUEUE_CONNECTION;
    $container['config']['queue.failed'] = ['driver' => 'database-uuids', 'database' => 'default',
        'table' => 'failed_jobs'];
    $manager = $queue->getQueueManager();
    $container->instance('queue', $manager);
    $container->instance(Illuminate\Contracts\Queue\Factory::class, $manager);
    $container->instance(Illuminate\Contracts\Queue\Monitor::class, $manager);
    $container->instance('queue.failer',
        new DatabaseUuidFailedJobProvider($container['db'], 'default', 'failed_jobs'));

    // BusServiceProvider: the dispatcher behind dispatch(), Job::dispatch() and chains.
    $bus = new BusDispatcher($container, function ($connection = null) use ($container) {
        return $container[Illuminate\Contracts\Queue\Factory::class]->connection($connection);
    });
    $container->instance(BusDispatcher::class, $bus);
    $container->instance(Illuminate\Contracts\Bus\Dispatcher::class, $bus);
    $container->instance(Illuminate\Contracts\Bus\QueueingDispatcher::class, $bus);

    // EventServiceProvider: queued listeners go through the queue manager.
    $events->setQueueResolver(fn () => $container['queue']);
    $events->listen(\App\Things\OrderShipped::class,
        [\App\Things\SendShipmentNotification::class, 'handle']);

    // MailServiceProvider with the array transport (config/mail.php's 'array' mailer); a sent
    // message is recorded in the harness log.
    $config = $container['config'];
    $config['mail.default'] = 'array';
    $config['mail.mailers.array'] = ['transport' => 'array'];
    $config['mail.from'] = ['address' => 'shop@example.com', 'name' => 'Shop'];
    $views = new Illuminate\View\Factory(new Illuminate\View\Engines\EngineResolver,
        new Illuminate\View\FileViewFinder(new Illuminate\Filesystem\Filesystem, []), $events);
    $container->instance('view', $views);
    $container->instance(Illuminate\Contracts\View\Factory::class, $views);
    $mail = new Illuminate\Mail\MailManager($container);
    $container->instance('mail.manager', $mail);
    $container->instance(Illuminate\Contracts\Mail\Factory::class, $mail);
    $container->bind('mailer', fn ($app) => $app['mail.manager']->mailer());
    $container->bind(Illuminate\Contracts\Mail\Mailer::class, fn ($app) => $app['mailer']);
    $events->listen(Illuminate\Mail\Events\MessageSent::class, function ($sent) {
        \App\Things\record_thing(['class' => 'mail', 'to' => array_keys($sent->message->getTo()),
            'subject' => $sent->message->getSubject()]);
    });

    // NotificationServiceProvider.
    $channels = new Illuminate\Notifications\ChannelManager($container);
    $container->instance(Illuminate\Notifications\ChannelManager::class, $channels);
    $container->instance(Illuminate\Contracts\Notifications\Dispatcher::class, $channels);
    $container->instance(Illuminate\Contracts\Notifications\Factory::class, $channels);

    // BusServiceProvider::registerBatchServices: batches in job_batches.
    $container->singleton(Illuminate\Bus\BatchRepository::class, fn ($app) =>
        new Illuminate\Bus\DatabaseBatchRepository($app->make(Illuminate\Bus\BatchFactory::class),
            $app['db']->connection('default'), 'job_batches'));
    $container->alias(Illuminate\Bus\BatchRepository::class, Illuminate\Bus\DatabaseBatchRepository::class);

    $handler = new StderrExceptionHandler;
    $container->instance(ExceptionHandler::class, $handler);

    // QueueServiceProvider::registerWorker (no maintenance mode, no log context).
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
    // Laravel 8.83's Illuminate/Queue/Console/stubs/batches.stub
    if (! $schema->hasTable('job_batches')) {
        $schema->create('job_batches', function ($table) {
            $table->string('id')->primary();
            $table->string('name');
            $table->integer('total_jobs');
            $table->integer('pending_jobs');
            $table->integer('failed_jobs');
            $table->text('failed_job_ids');
            $table->mediumText('options')->nullable();
            $table->integer('cancelled_at')->nullable();
            $table->integer('created_at');
            $table->integer('finished_at')->nullable();
        });
    }
    // Laravel 8.83's Illuminate/Cache/Console/stubs/cache.stub (the database cache store).
    if (! $schema->hasTable('cache')) {
        $schema->create('cache', function ($table) {
            $table->string('key')->primary();
            $table->mediumText('value');
            $table->integer('expiration');
        });
        $schema->create('cache_locks', function ($table) {
            $table->string('key')->primary();
            $table->string('owner');
            $table->integer('expiration');
        });
    }
    // The users table harness.php makes (for SerializesModels cases).
    if (! $schema->hasTable('users')) {
        $schema->create('users', function ($table) {
            $table->bigIncrements('id');
            $table->string('name');
        });
        DB::table('users')->insert(['id' => 7, 'name' => 'Ada']);
    }
}

function all_cases(): array
{
    return \App\Jobs\worker_cases() + \App\Jobs\failing_cases() + \App\Jobs\job_cases();
}

/** Illuminate\Foundation\Bus\PendingDispatch::__destruct → Bus Dispatcher::dispatch, keeping the id. */
function dispatch_cases(Container $container, array $names): void
{
    $cases = all_cases();
    $names = $names ?: array_keys(\App\Jobs\worker_cases());
    foreach ($names as $name) {
        if (! isset($cases[$name])) {
            fail_usage("unknown case {$name}; known: " . implode(', ', array_keys($cases)));
        }
    }
    foreach ($names as $name) {
        $job = $cases[$name];
        $props = \App\Jobs\job_props($job);
        $id = $container[Illuminate\Contracts\Bus\Dispatcher::class]->dispatch($job);
        $row = DB::table('jobs')->where('id', $id)->first();
        out([
            'case' => $name,
            'id' => (int) $id,
            'uuid' => json_decode($row->payload, true)['uuid'],
            'queue' => $row->queue,
            'payload' => $row->payload,
            'class' => get_class($job),
            'props' => (object) $props,
            'available_at' => (int) $row->available_at,
            'created_at' => (int) $row->created_at,
        ]);
    }
}

function parse_options(array $args, array $defaults, array $flags): array
{
    $options = $defaults;
    foreach ($flags as $flag) {
        $options[$flag] = false;
    }
    foreach ($args as $arg) {
        if (! str_starts_with($arg, '--')) {
            fail_usage("unexpected argument {$arg}");
        }
        [$name, $value] = array_pad(explode('=', substr($arg, 2), 2), 2, null);
        if (in_array($name, $flags, true) && $value === null) {
            $options[$name] = true;
        } elseif (array_key_exists($name, $defaults) && $value !== null) {
            $options[$name] = $value;
        } else {
            fail_usage("unknown option {$arg}");
        }
    }
    return $options;
}

/** Illuminate\Queue\Console\WorkCommand::handle for the 'database' connection. */
function work(Container $container, array $args): int
{
    // WorkCommand's signature defaults (strings, as Symfony Console hands them over).
    $option = parse_options($args, ['name' => 'default', 'queue' => null, 'delay' => '0',
        'backoff' => '0', 'max-jobs' => '0', 'max-time' => '0', 'memory' => '128', 'sleep' => '3',
        'rest' => '0', 'timeout' => '60', 'tries' => '1'], ['once', 'stop-when-empty', 'force']);

    // WorkCommand::listenForEvents / writeOutput / writeStatus / logFailedJob
    $writeStatus = function ($job, string $status) {
        fwrite(STDOUT, sprintf("[%s][%s] %s %s\n", Carbon::now()->format('Y-m-d H:i:s'),
            $job->getJobId(), str_pad("{$status}:", 11), $job->resolveName()));
    };
    $events = $container['events'];
    $events->listen(JobProcessing::class, fn ($event) => $writeStatus($event->job, 'Processing'));
    $events->listen(JobProcessed::class, fn ($event) => $writeStatus($event->job, 'Processed'));
    $events->listen(JobFailed::class, function ($event) use ($writeStatus, $container) {
        $writeStatus($event->job, 'Failed');
        $container['queue.failer']->log($event->connectionName, $event->job->getQueue(),
            $event->job->getRawBody(), $event->exception);
    });

    // WorkCommand::getQueue
    $queue = $option['queue'] ?: ($container['config']['queue.connections.' . QUEUE_CONNECTION]['queue']
        ?? 'default');

    // WorkCommand::gatherWorkerOptions
    $options = new WorkerOptions($option['name'], max($option['backoff'], $option['delay']),
        $option['memory'], $option['timeout'], $option['sleep'], $option['tries'], $option['force'],
        $option['stop-when-empty'], $option['max-jobs'], $option['max-time'], $option['rest']);

    // WorkCommand::runWorker
    $status = $container['queue.worker']->setName($option['name'])
        ->setCache($container[Illuminate\Contracts\Cache\Repository::class])
        ->{$option['once'] ? 'runNextJob' : 'daemon'}(QUEUE_CONNECTION, $queue, $options);
    return is_int($status) ? $status : 0;
}

/** Illuminate\Queue\Console\RetryCommand::handle / retryJob / resetAttempts / refreshRetryUntil. */
function retry(Container $container, array $ids): void
{
    $failer = $container['queue.failer'];
    if (count($ids) === 1 && $ids[0] === 'all') {
        $ids = Illuminate\Support\Arr::pluck($failer->all(), 'id');
    }
    foreach (array_values(array_filter(array_unique($ids))) as $id) {
        $job = $failer->find($id);
        if (is_null($job)) {
            out(['uuid' => $id, 'retried' => false,
                'message' => "Unable to find failed job with ID [{$id}]."]);
            continue;
        }
        $container['events']->dispatch(new JobRetryRequested($job));
        $payload = refresh_retry_until($container, reset_attempts($job->payload));
        $newId = $container['queue']->connection($job->connection)->pushRaw($payload, $job->queue);
        $failer->forget($id);
        out(['uuid' => $id, 'retried' => true, 'id' => (int) $newId,
            'connection' => $job->connection, 'queue' => $job->queue, 'payload' => $payload,
            'message' => "The failed job [{$id}] has been pushed back onto the queue!"]);
    }
}

function reset_attempts($payload)
{
    $payload = json_decode($payload, true);
    if (isset($payload['attempts'])) {
        $payload['attempts'] = 0;
    }
    return json_encode($payload);
}

function refresh_retry_until(Container $container, $payload)
{
    $payload = json_decode($payload, true);
    if (! isset($payload['data']['command'])) {
        return json_encode($payload);
    }
    if (Str::startsWith($payload['data']['command'], 'O:')) {
        $instance = unserialize($payload['data']['command']);
    } elseif ($container->bound(Illuminate\Contracts\Encryption\Encrypter::class)) {
        $instance = unserialize($container->make(Illuminate\Contracts\Encryption\Encrypter::class)
            ->decrypt($payload['data']['command']));
    }
    if (! isset($instance)) {
        throw new RuntimeException('Unable to extract job payload.');
    }
    if (is_object($instance) && ! $instance instanceof \__PHP_Incomplete_Class
        && method_exists($instance, 'retryUntil')) {
        $retryUntil = $instance->retryUntil();
        $payload['retryUntil'] = $retryUntil instanceof DateTimeInterface
            ? $retryUntil->getTimestamp() : $retryUntil;
    }
    return json_encode($payload);
}

/** Illuminate\Queue\Console\ListFailedCommand::getFailedJobs / parseFailedJob / extractJobName. */
function failed(Container $container): void
{
    foreach ($container['queue.failer']->all() as $failed) {
        $failed = (array) $failed;
        $payload = json_decode($failed['payload'], true);
        $class = null;
        if ($payload && ! isset($payload['data']['command'])) {
            $class = $payload['job'] ?? null;
        } elseif ($payload && isset($payload['data']['command'])) {
            preg_match('/"([^"]+)"/', $payload['data']['command'], $matches);
            $class = $matches[1] ?? $payload['job'] ?? null;
        }
        out([
            'uuid' => $failed['id'],
            'connection' => $failed['connection'],
            'queue' => $failed['queue'],
            'class' => $class ?: '',
            'failed_at' => (string) $failed['failed_at'],
            'exception' => strtok((string) $failed['exception'], "\n"),
            'payload' => $failed['payload'],
        ]);
    }
}

/** dispatch() of a ShouldBeUnique job: PendingDispatch takes the unique lock in the database
 * cache store (config/cache.php's 'database' store: table cache, lock table cache_locks). */
function dispatch_unique(Container $container, string $class, string $arg): void
{
    $store = new Illuminate\Cache\DatabaseStore($container['db']->connection('default'), 'cache',
        'laravel_cache', 'cache_locks');
    $container->instance(Illuminate\Contracts\Cache\Repository::class, new CacheRepository($store));
    $before = (int) DB::table('jobs')->max('id');
    $name = "App\\Things\\{$class}";
    dispatch(new $name(is_numeric($arg) ? (int) $arg : $arg));  // PendingDispatch::__destruct
    $row = DB::table('jobs')->where('id', '>', $before)->first();
    out(['dispatched' => $row !== null, 'id' => $row ? (int) $row->id : null]);
}

/** Laravel 12.40's QueueManager::pause / pauseFor / resume / isPaused, verbatim but for the
 * store they reach (8.83 has no QueueManager::pause; its DatabaseStore writes a key as 12.x's
 * does: prefix + key, serialize()d value, expiration = now + seconds, forever = ten years):
 *     $this->app['cache']->store()->forever("illuminate:queue:paused:{$connection}:{$queue}", true);
 *     $this->app['cache']->store()->put("illuminate:queue:paused:{$connection}:{$queue}", true, $ttl);
 *     $this->app['cache']->store()->forget("illuminate:queue:paused:{$connection}:{$queue}");
 *     return (bool) $this->app['cache']->store()->get("illuminate:queue:paused:{$connection}:{$queue}", false);
 * which Worker::getNextJob asks of each queue before it pops it (a paused one is skipped). */
function queue_pause(Container $container, string $verb, string $connection, string $queue,
    ?string $ttl): void
{
    $store = new CacheRepository(new Illuminate\Cache\DatabaseStore(
        $container['db']->connection('default'), 'cache', 'laravel_cache', 'cache_locks'));
    $key = "illuminate:queue:paused:{$connection}:{$queue}";
    switch ($verb) {
        case 'pause': $store->forever($key, true); break;
        case 'pause-for': $store->put($key, true, (int) $ttl); break;
        case 'resume': $store->forget($key); break;
        case 'is-paused': break;
        default: fail_usage("queue-pause: unknown verb {$verb}");
    }
    out(['paused' => (bool) $store->get($key, false)]);
}

/** Bus::batch([...])->then(...)->catch(...)->finally(...)->dispatch(), as an app writes it. */
function dispatch_batch(Container $container, array $args): void
{
    $allow = in_array('--allow-failures', $args, true);
    $labels = array_values(array_filter($args, fn ($a) => $a !== '--allow-failures'));
    $before = (int) DB::table('jobs')->max('id');
    $pending = $container[Illuminate\Contracts\Bus\Dispatcher::class]->batch(
        array_map(fn ($label) => new \App\Things\BatchStep($label), $labels)
    )->then(function (Illuminate\Bus\Batch $batch) {
        \App\Things\record_thing(['class' => 'batch-then', 'batch' => $batch->id]);
    })->catch(function (Illuminate\Bus\Batch $batch, Throwable $e) {
        \App\Things\record_thing(['class' => 'batch-catch', 'batch' => $batch->id,
            'error' => $e->getMessage()]);
    })->finally(function (Illuminate\Bus\Batch $batch) {
        \App\Things\record_thing(['class' => 'batch-finally', 'batch' => $batch->id]);
    })->name('nightly');
    if ($allow) {
        $pending->allowFailures();
    }
    $batch = $pending->dispatch();
    $ids = DB::table('jobs')->where('id', '>', $before)->orderBy('id')->pluck('id')->all();
    out(['batch_id' => $batch->id, 'ids' => array_map('intval', $ids)]);
}

/** dispatch(function () { … }): alone on its line, as the closure serializer finds a closure
 * by the line it starts on. */
function dispatch_closure(): void
{
    dispatch(
        function () {
            \App\Things\record_thing(['class' => 'closure']);
        }
    );
}

/** What a Laravel app queues besides jobs, each through the call an app makes. */
function queue_things(Container $container, array $names): void
{
    $customer = \App\Things\Customer::find(7);
    $cases = [
        'listener' => fn () => event(new \App\Things\OrderShipped($customer, 1001,
            Carbon::create(2024, 5, 6, 7, 8, 9))),
        'mailable' => fn () => Illuminate\Support\Facades\Mail::to('ada@example.com')
            ->cc('ops@example.com')->queue(new \App\Things\OrderShippedMail($customer, 1001)),
        'notification' => fn () => $customer->notify(new \App\Things\InvoicePaid(42, 99.5)),
        'closure' => 'dispatch_closure',
        'models' => function () {
            if (! DB::table('users')->where('id', 8)->exists()) {
                DB::table('users')->insert([['id' => 8, 'name' => 'Grace'], ['id' => 9, 'name' => 'Ada']]);
            }
            $customers = \App\Things\Customer::with('namesakes')->whereIn('id', [7, 8])->orderBy('id')->get();
            dispatch(new \App\Things\SyncCustomers($customers,
                \App\Things\Customer::with('namesakes')->find(7)));
        },
    ];
    foreach ($names ?: array_keys($cases) as $name) {
        if (! isset($cases[$name])) {
            fail_usage("unknown case {$name}; known: " . implode(', ', array_keys($cases)));
        }
        $before = (int) DB::table('jobs')->max('id');
        $cases[$name]();
        $row = DB::table('jobs')->where('id', '>', $before)->orderBy('id')->first();
        out(['case' => $name, 'id' => (int) $row->id,
            'uuid' => json_decode($row->payload, true)['uuid'], 'queue' => $row->queue,
            'payload' => $row->payload]);
    }
}

function info(Container $container): void
{
    $queue = $container['queue']->connection(QUEUE_CONNECTION);
    $pdo = $queue->getDatabase()->getPdo();
    $lock = new ReflectionMethod($queue, 'getLockForPopping');
    $lock->setAccessible(true);
    out([
        'driver' => $pdo->getAttribute(PDO::ATTR_DRIVER_NAME),
        'server_version' => $pdo->getAttribute(PDO::ATTR_SERVER_VERSION),
        'lock_for_popping' => $lock->invoke($queue),
    ]);
}

$cmd = $argv[1] ?? '';
$conn = $argv[2] ?? fail_usage(
    'usage: queue_harness.php migrate|dispatch|work|retry|failed|push-raw|info CONN …');
switch ($cmd) {
    case 'migrate':
        boot($conn);
        migrate();
        break;
    case 'dispatch':
        dispatch_cases(boot($conn, $argv[3] ?? fail_usage('dispatch CONN APP_KEY [CASE …]')),
            array_slice($argv, 4));
        break;
    case 'work':
        exit(work(boot($conn, $argv[3] ?? fail_usage('work CONN APP_KEY [--option …]')),
            array_slice($argv, 4)));
    case 'retry':
        retry(boot($conn, $argv[3] ?? fail_usage('retry CONN APP_KEY UUID…')), array_slice($argv, 4));
        break;
    case 'failed':
        failed(boot($conn));
        break;
    case 'push-raw':
        $container = boot($conn);
        $id = $container['queue']->connection(QUEUE_CONNECTION)
            ->pushRaw(stream_get_contents(STDIN), $argv[3] ?? null);
        out(['id' => (int) $id]);
        break;
    case 'info':
        info(boot($conn));
        break;
    case 'dispatch-unique':
        dispatch_unique(boot($conn, $argv[3] ?? fail_usage('dispatch-unique CONN APP_KEY CLASS ARG')),
            $argv[4] ?? fail_usage('CLASS'), $argv[5] ?? fail_usage('ARG'));
        break;
    case 'batch':
        dispatch_batch(boot($conn, $argv[3] ?? fail_usage('batch CONN APP_KEY LABEL…')),
            array_slice($argv, 4));
        break;
    case 'queue-pause':
        queue_pause(boot($conn), $argv[3] ?? fail_usage('queue-pause CONN VERB CONNECTION QUEUE [TTL]'),
            $argv[4] ?? fail_usage('CONNECTION'), $argv[5] ?? fail_usage('QUEUE'), $argv[6] ?? null);
        break;
    case 'queue-things':
        queue_things(boot($conn, $argv[3] ?? fail_usage('queue-things CONN APP_KEY [CASE …]')),
            array_slice($argv, 4));
        break;
    default:
        fail_usage("unknown command {$cmd}");
}
